"""The periodic sweep: list every workload the backend has, compare with the live jobs, and
reconcile what differs. Together with the watch (or alone) it converges: a lost task, a missed
event or a worker crash is repaired within one sweep period."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from controlpanel.workloads import tasks
from controlpanel.workloads.backend import get_backend
from controlpanel.workloads.lifecycle import target_states
from controlpanel.workloads.models import FINAL_STATES, LIVE_STATES, Job, JobState
from controlpanel.workloads.reconcile import observe
from deploy.types import ObservedWorkload, WorkloadKind

log = logging.getLogger(__name__)
# A finished job whose log is still not archived this long after it ended lost its task.
FINALIZE_GRACE = timedelta(minutes=2)


def sweep() -> dict[str, int]:
    # Keyed by namespace too: a run counts only in its own project's namespace, whatever an
    # object elsewhere claims with our labels (the backend drops those as well).
    observed = {
        (o.namespace, o.id, o.run): o
        for o in get_backend().observe_all()
        if o.kind is WorkloadKind.JOB
    }
    counts = {"live": 0, "changed": 0, "relaunched": 0, "missing": 0}
    for job in _live_jobs():
        counts["live"] += 1
        seen = observed.get((job.project.namespace, str(job.pk), job.run))
        if seen is None:
            _missing(job, counts)
        elif _differs(job, seen):
            observe(str(job.pk), seen)
            counts["changed"] += 1
    _admit_waiting()
    _refinalize()
    tasks.notices_resend()  # end notices claimed, then lost before they were sent
    return counts


def record_observation(observed: ObservedWorkload) -> bool:
    """Handle one observation from a watch: reconcile the job if it differs from its row."""
    if observed.kind is not WorkloadKind.JOB:
        return False
    try:
        job_id = uuid.UUID(observed.id)
    except ValueError:
        return False  # not one of ours (a foreign id under our labels)
    job = (
        Job.objects.select_related("project", "flavor")
        .filter(pk=job_id, run=observed.run, state__in=LIVE_STATES)
        .first()
    )
    if job is None or job.project.namespace != observed.namespace:
        return False  # an object outside the job's project namespace speaks for nothing
    if not _differs(job, observed):
        return False
    observe(str(job.pk), observed)
    return True


def _live_jobs() -> list[Job]:
    admitted = Q(state__in=LIVE_STATES) & ~Q(state=JobState.QUEUED, admitted_at=None)
    # Only what comparing with an observation needs: observe() re-reads a job it acts on.
    return list(
        Job.objects.filter(admitted)
        .select_related("project")
        .only(
            "state",
            "state_reason",
            "run",
            "launched_run",
            "stop_requested",
            "timeout",
            "started_at",
            "finished_at",
            "admitted_at",
            "project_id",
            "project__slug",
        )
    )


def _missing(job: Job, counts: dict[str, int]) -> None:
    if job.launched_run < job.run:
        tasks.job_reconcile.delay(str(job.pk))  # admitted, never launched: the task was lost
        counts["relaunched"] += 1
    else:
        observe(str(job.pk))  # look again, alone: it may have been created after the list
        counts["missing"] += 1


def _differs(job: Job, seen: ObservedWorkload) -> bool:
    if seen.needs_apply:
        return True
    if seen.started_at != job.started_at or seen.finished_at != job.finished_at:
        return True
    targets = target_states(job, seen)
    if not targets:
        return False
    state, reason = targets[-1]
    return state != job.state or bool(reason and reason != job.state_reason)


def _admit_waiting() -> None:
    waiting = (
        Job.objects.filter(state=JobState.QUEUED, admitted_at=None)
        .values_list("project_id", flat=True)
        .distinct()
    )
    for project_id in waiting:
        tasks.project_admit.delay(project_id)


def _refinalize() -> None:
    stale = Job.objects.filter(
        state__in=FINAL_STATES,
        logs_archived=False,
        state_changed_at__lt=timezone.now() - FINALIZE_GRACE,
    )
    for job_id, run in stale.values_list("pk", "run")[:100]:
        tasks.job_finalize.delay(str(job_id), run)
