"""Writes on jobs: submit, stop, run again, retry the final push, delete.

Each validates, writes the desired state, and enqueues work with `delay_on_commit` (never
before the row is committed). The Celery tasks then reconcile toward it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from controlpanel.engine import services as writes
from controlpanel.engine.datastores import launch_refusal
from controlpanel.engine.lifecycle import record_state
from controlpanel.jobs import tasks
from controlpanel.jobs.models import Job
from controlpanel.jobs.observation import PUSH_RETRIED
from controlpanel.jobs.states import JobState
from controlpanel.jobs.validation import validate_job
from controlpanel.projects.access import ProjectAccess

S = JobState
SUBMITTED = "submitted"


@transaction.atomic
def job_submit(*, access: ProjectAccess, user: Any, data: Mapping[str, Any]) -> Job:
    """Validate and store a job (QUEUED), then admit it through the project's quota."""
    spec = validate_job(project=access.project, data=data)
    return writes.workload_create(
        access=access, user=user, model=Job, fields=vars(spec), reason=SUBMITTED
    )


def job_stop(*, access: ProjectAccess, user: Any, job: Job, reason: str = "") -> Job:
    """Stop a live job: INTERRUPTING, then INTERRUPTED once the run ended and rw pushed.
    `reason`: why, when the panel stops it (a budget reached), instead of who asked."""
    return writes.workload_stop(access=access, user=user, workload=job, reason=reason)


def job_rerun(*, access: ProjectAccess, user: Any, job: Job) -> Job:
    """Run a finished job again: a new run with fresh objects, queued behind the others."""
    return writes.workload_start(access=access, user=user, workload=job)


@transaction.atomic
def job_retry_push(*, access: ProjectAccess, user: Any, job: Job) -> Job:
    """After SYNC_FAILED the data was kept: push it again."""
    job = writes.workload_locked(access=access, user=user, workload=job)
    if job.state != S.SYNC_FAILED:
        raise ValidationError("Only a job whose final push failed (SYNC_FAILED) can retry it.")
    if job.workspace_deleted_at is not None:
        raise ValidationError(
            "The push cannot be retried: its workspace was deleted on "
            f"{job.workspace_deleted_at:%Y-%m-%d}, {settings.WORKSPACE_KEPT_DAYS} days after the "
            "run ended."
        )
    refused = launch_refusal(project=job.project, volumes=job.volumes)
    if refused:  # the push would write (rwd: delete) in a bucket no longer this project's
        raise ValidationError(f"The push cannot be retried: {refused}.")
    # Back to FINALIZING: the one way a final state is left (observations never do it).
    record_state(job, S.FINALIZING, f"{PUSH_RETRIED} {user.username}")
    tasks.job_retry_push.delay_on_commit(str(job.pk))
    return job


def job_delete(*, access: ProjectAccess, user: Any, job: Job) -> None:
    """Delete a finished job, its objects and its log (billing usage is kept)."""
    writes.workload_delete(access=access, user=user, workload=job)
