"""Writes on jobs: submit, stop, run again, retry the final push, delete.

Each validates, writes the desired state, and enqueues work with `delay_on_commit` (never
before the row is committed). The Celery tasks then reconcile toward it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel import audit
from controlpanel.projects.access import ProjectAccess
from controlpanel.workloads import tasks
from controlpanel.workloads.datastores import launch_refusal
from controlpanel.workloads.lifecycle import PUSH_RETRIED, record_state
from controlpanel.workloads.models import FINAL_STATES, Job, JobEvent, JobLogLine, JobState
from controlpanel.workloads.validation import validate_job
from storage.volumes import render_volume_spec

S = JobState
SUBMITTED = "submitted"


@transaction.atomic
def job_submit(*, access: ProjectAccess, user: Any, data: Mapping[str, Any]) -> Job:
    """Validate and store a job (QUEUED), then admit it through the project's quota."""
    spec = validate_job(project=access.project, data=data)
    fields = vars(spec) | {"volumes": [render_volume_spec(v) for v in spec.volumes]}
    job = Job(project=access.project, owner=user, state_reason=SUBMITTED, **fields)
    job.save(force_insert=True)
    JobEvent.objects.create(job=job, run=job.run, state=S.QUEUED, reason=SUBMITTED)
    audit.record("workload.start", actor=user, project=access.project, target=job, name=job.name)
    tasks.admit_soon(access.project.pk)
    return job


def _locked_for(access: ProjectAccess, user: Any, job: Job) -> Job:
    """The job's row, locked, once the user may act on it (its owner or a manager)."""
    if not (access.can_manage or job.owner_id == user.pk):
        raise PermissionDenied("Only the job's owner or a project manager can do this.")
    return Job.objects.select_for_update(of=("self",)).get(pk=job.pk)


@transaction.atomic
def job_stop(*, access: ProjectAccess, user: Any, job: Job, reason: str = "") -> Job:
    """Stop a live job: INTERRUPTING, then INTERRUPTED once the run ended and rw pushed.
    `reason`: why, when the panel stops it (a budget reached), instead of who asked."""
    job = _locked_for(access, user, job)
    if job.state in FINAL_STATES:
        raise ValidationError(f"The job already ended ({job.state}).")
    audit.record(
        "workload.stop", actor=user, project=job.project, target=job, name=job.name, reason=reason
    )
    if job.launched_run < job.run:
        # Never handed to the backend: nothing to stop there.
        said = f"{reason} before it started" if reason else None
        record_state(job, S.INTERRUPTED, said or f"stopped by {user.username} before it started")
        tasks.admit_soon(job.project_id)
        return job
    if not job.stop_requested:
        job.stop_requested = True
        job.save(update_fields=["stop_requested", "updated_at"])
        record_state(job, S.INTERRUPTING, reason or f"stop requested by {user.username}")
    tasks.job_reconcile.delay_on_commit(str(job.pk))
    return job


@transaction.atomic
def job_rerun(*, access: ProjectAccess, user: Any, job: Job) -> Job:
    """Run a finished job again: a new run with fresh objects, queued behind the others."""
    job = _locked_for(access, user, job)
    if job.state not in FINAL_STATES:
        raise ValidationError("Only a finished job can be run again; stop it first.")
    job.run += 1
    job.stop_requested = False
    job.queued_at = timezone.now()
    job.admitted_at = job.started_at = job.finished_at = job.exit_code = None
    job.progress, job.loss_curve = {}, []
    job.log_cursor, job.log_lines, job.logs_archived = "", 0, False
    job.save()
    record_state(job, S.QUEUED, f"run {job.run} requested by {user.username}")
    audit.record(
        "workload.start", actor=user, project=job.project, target=job, name=job.name, run=job.run
    )
    tasks.admit_soon(job.project_id)
    return job


@transaction.atomic
def job_retry_push(*, access: ProjectAccess, user: Any, job: Job) -> Job:
    """After SYNC_FAILED the data was kept: push it again."""
    job = _locked_for(access, user, job)
    if job.state != S.SYNC_FAILED:
        raise ValidationError("Only a job whose final push failed (SYNC_FAILED) can retry it.")
    refused = launch_refusal(project=job.project, volumes=job.volumes)
    if refused:  # the push would write (rwd: delete) in a bucket no longer this project's
        raise ValidationError(f"The push cannot be retried: {refused}.")
    # Back to FINALIZING: the one way a final state is left (observations never do it).
    record_state(job, S.FINALIZING, f"{PUSH_RETRIED} {user.username}")
    tasks.job_retry_push.delay_on_commit(str(job.pk))
    return job


@transaction.atomic
def job_delete(*, access: ProjectAccess, user: Any, job: Job) -> None:
    """Delete a finished job, its objects and its log (billing usage is kept)."""
    job = _locked_for(access, user, job)
    if job.state not in FINAL_STATES:
        raise ValidationError("Stop the job before deleting it.")
    refs = [
        (job.project.slug, job.project.namespace, str(job.pk), run) for run in range(1, job.run + 1)
    ]
    audit.record("workload.delete", actor=user, project=job.project, target=job, name=job.name)
    JobLogLine.objects.filter(job=job).delete()
    job.delete()
    tasks.job_cleanup.delay_on_commit(refs)
