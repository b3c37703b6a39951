"""The periodic sweep: list every workload the backend has, compare with the live rows of
every kind, and reconcile what differs. Together with the watch (or alone) it converges: a
lost task, a missed event or a worker crash is repaired within one sweep period."""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from controlpanel.engine import tasks
from controlpanel.engine.admission import CLAIM_KEPT_STATES, WAITING_STATES
from controlpanel.engine.backend import app_request, get_backend, job_request
from controlpanel.engine.lifecycle import is_behind, target_states
from controlpanel.engine.models import (
    FINAL_STATES,
    LIVE_STATES,
    JobState,
    Kind,
    NotebookState,
    Workload,
)
from controlpanel.engine.notebooks import stop_idle_notebooks
from controlpanel.engine.reconcile import observe
from controlpanel.engine.replicas import REPLICA_UIDS, serving_replicas
from controlpanel.projects.models import Project
from deploy.types import ObservedWorkload, Phase, WorkloadKind

log = logging.getLogger(__name__)
# Phases of a run that holds (or waits for) its pod's GPUs.
STOPPABLE = frozenset({Phase.QUEUED, Phase.PENDING, Phase.INITIALIZING, Phase.RUNNING})
ORPHANS_PER_SWEEP = 100  # each costs a few API calls; the rest wait for the next sweep
# Sent by every sweep with the run UIDs (`uids`) of the pods it listed alive (started, not
# finished) and the time the listing began (`at`): billing notes when each run was last seen,
# so a run whose pod vanishes is closed there (billing/receivers.py).
runs_seen = Signal()


def sweep() -> dict[str, int]:
    # Keyed by namespace too: a run counts only in its own project's namespace, whatever an
    # object elsewhere claims with our labels (the backend drops those as well).
    listed_at = timezone.now()
    observed = {(o.kind.value, o.namespace, o.id, o.run): o for o in get_backend().observe_all()}
    alive = [uid for o in observed.values() for uid in _alive(o)]
    runs_seen.send(sender=Workload, uids=alive, at=listed_at)
    counts = {"live": 0, "changed": 0, "relaunched": 0, "missing": 0, "orphans": 0}
    jobs = _live_jobs()
    namespaces = _namespaces({job.project_id for job in jobs})
    for job in jobs:
        counts["live"] += 1
        key = (job.kind, namespaces[job.project_id], str(job.pk), job.backend_run)
        seen = observed.pop(key, None)
        if seen is None:
            _missing(job, counts)
        elif _differs(job, seen):
            observe(str(job.pk), seen)
            counts["changed"] += 1
    leftovers = list(observed.values())
    counts["orphans"] = collect_orphans([o for o in leftovers if o.kind is WorkloadKind.JOB])
    counts["orphans"] += _notebook_orphans(
        [o for o in leftovers if o.kind is WorkloadKind.NOTEBOOK]
    )
    counts["orphans"] += _app_orphans([o for o in leftovers if o.kind is WorkloadKind.APP])
    _admit_waiting()
    _refinalize()
    counts["idle_stopped"] = stop_idle_notebooks()
    tasks.notices_resend()  # end notices claimed, then lost before they were sent
    return counts


def _alive(seen: ObservedWorkload) -> list[str]:
    """The run uids an observation shows alive: an app's replicas, or the one pod run."""
    if seen.replica_runs is not None:
        return serving_replicas(seen)
    return [seen.run_uid] if seen.run_uid and seen.started_at and not seen.finished_at else []


def record_observation(observed: ObservedWorkload) -> bool:
    """Handle one observation from a watch: reconcile the row if it differs from it."""
    try:
        job_id = uuid.UUID(observed.id)
    except ValueError:
        return False  # not one of ours (a foreign id under our labels)
    rows = Workload.objects.select_related("project", "flavor").filter(
        pk=job_id, kind=observed.kind.value, state__in=LIVE_STATES
    )
    if observed.kind is WorkloadKind.JOB:
        rows = rows.filter(run=observed.run)
    job = rows.first()
    if job is None or job.project.namespace != observed.namespace:
        return False  # an object outside the job's project namespace speaks for nothing
    if not _differs(job, observed):
        return False
    observe(str(job.pk), observed)
    return True


def _live_jobs() -> list[Workload]:
    admitted = Q(state__in=LIVE_STATES) & ~Q(admitted_at=None)
    # Only what comparing with an observation needs: observe() re-reads a job it acts on.
    # No project joined: a few projects' namespaces are read once (`_namespaces`).
    return list(
        Workload.objects.filter(admitted).only(
            "kind",
            "state",
            "state_reason",
            "run",
            "launched_run",
            "stop_requested",
            "timeout",
            "started_at",
            "finished_at",
            "progress",
            "project_id",
        )
    )


def _namespaces(project_ids: set[int]) -> dict[int, str]:
    projects = Project.objects.filter(pk__in=project_ids).only("slug")
    return {project.pk: project.namespace for project in projects}


def _missing(job: Workload, counts: dict[str, int]) -> None:
    if job.launched_run < job.run or job.state == NotebookState.DELETING:
        # Admitted, never launched (or a deletion to finish): the task was lost. Sent again,
        # spaced out per row, so a task that keeps failing is not re-sent every sweep.
        if tasks.redrive(str(job.pk)):
            counts["relaunched"] += 1
    else:
        observe(str(job.pk))  # look again, alone: it may have been created after the list
        counts["missing"] += 1


def _differs(job: Workload, seen: ObservedWorkload) -> bool:
    if seen.needs_apply:
        return True
    targets = target_states(job, seen)
    if targets and is_behind(job, targets) and seen.phase is not Phase.QUEUED:
        return False  # older than the row (observe() reads a QUEUED one again, fresh)
    if seen.started_at != job.started_at or seen.finished_at != job.finished_at:
        return True
    if seen.replica_runs is not None and serving_replicas(seen) != job.progress.get(REPLICA_UIDS):
        return True  # a replica started or ended: its run opens or closes
    if not targets:
        return False
    state, reason = targets[-1]
    return state != job.state or bool(reason and reason != job.state_reason)


def collect_orphans(runs: list[ObservedWorkload]) -> int:
    """Delete what runs on for no live job: the objects of a run whose row ended (and was
    finalized), is gone, or is at another run. The case that needs it: the Job was created,
    the reconcile's transaction rolled back, and 'stop' then ended the never-launched row
    without the cluster; its pod kept its GPUs, out of the quota and unbilled.

    Only after `JOB_ORPHAN_GRACE_SECONDS`, from the row's end and the objects' creation (a
    row read before a commit must not cost a run). SYNC_FAILED keeps everything (the retried
    push needs the Job and the claim); ERROR keeps its Job and claim (data to rescue) but
    its pods are stopped. Returns how many runs were acted on, at most ORPHANS_PER_SWEEP."""
    if not runs:
        return 0
    before = timezone.now() - timedelta(seconds=settings.JOB_ORPHAN_GRACE_SECONDS)
    runs = [r for r in runs if r.created_at is None or r.created_at <= before]
    rows = _rows_of(runs)
    backend, acted = get_backend(), 0
    for seen in runs:
        row = rows.get(seen.id)
        if row is not None and row.project.namespace != seen.namespace:
            row = None  # another project's job id in this namespace: nothing of ours
        action = _orphan_action(row, seen, before)
        if not action:
            continue
        log.warning("orphan run %s of job %s in %s: %s", seen.run, seen.id, seen.namespace, action)
        if action == "stop" and row is not None:
            backend.stop_job(job=job_request(row))
        else:
            backend.delete_job(ref=seen.ref)
        acted += 1
        if acted == ORPHANS_PER_SWEEP:
            break
    return acted


def _rows_of(runs: list[ObservedWorkload]) -> dict[str, Workload]:
    ids = set()
    for seen in runs:
        try:
            ids.add(uuid.UUID(seen.id))
        except ValueError:
            continue  # not a job id: no row
    rows = Workload.objects.filter(pk__in=ids).select_related("project", "flavor")
    return {str(row.pk): row for row in rows}


def _orphan_action(row: Workload | None, seen: ObservedWorkload, before: datetime) -> str:
    """What to do with the objects of a run no live row of that run claimed: "delete",
    "stop", or "" to leave them."""
    if row is None or row.run != seen.run:
        return "delete"
    if row.state in LIVE_STATES or not row.logs_archived or row.state_changed_at > before:
        return ""  # running, or not finalized yet: job_finalize still reads the run
    if row.state in CLAIM_KEPT_STATES:
        return "stop" if row.state == JobState.ERROR and seen.phase in STOPPABLE else ""
    return "delete"


def _notebook_orphans(notebooks: list[ObservedWorkload]) -> int:
    """A notebook's objects outlive its stops (the workspace claim, the scaled-down server),
    not its row: those of a deleted notebook go, after the same grace as a job's."""
    if not notebooks:
        return 0
    before = timezone.now() - timedelta(seconds=settings.JOB_ORPHAN_GRACE_SECONDS)
    notebooks = [n for n in notebooks if n.created_at is None or n.created_at <= before]
    rows = _rows_of(notebooks)
    acted = 0
    for seen in notebooks:
        row = rows.get(seen.id)
        if row is None or row.project.namespace != seen.namespace or row.kind != Kind.NOTEBOOK:
            log.warning("orphan notebook %s in %s: delete", seen.id, seen.namespace)
            get_backend().delete_notebook(ref=seen.ref)
            acted += 1
    return acted


def _app_orphans(apps: list[ObservedWorkload]) -> int:
    """An app's objects (Deployment, Service, Ingress, autoscaler; locally its server) outlive
    its stops, not its row: those of a deleted app go. Those of an app that ended (FAILED,
    ERROR) yet still has replicas, which would hold their GPUs unbilled, are stopped, its
    address kept for a start. Both after the same grace as a job's."""
    if not apps:
        return 0
    before = timezone.now() - timedelta(seconds=settings.JOB_ORPHAN_GRACE_SECONDS)
    apps = [a for a in apps if a.created_at is None or a.created_at <= before]
    rows = _rows_of(apps)
    backend, acted = get_backend(), 0
    for seen in apps:
        row = rows.get(seen.id)
        if row is None or row.project.namespace != seen.namespace or row.kind != Kind.APP:
            log.warning("orphan app %s in %s: delete", seen.id, seen.namespace)
            backend.delete_app(ref=seen.ref)
        elif _app_left_running(row, seen, before):
            log.warning("app %s ended %s with replicas left: stop", seen.id, row.state)
            backend.apply_app(app=replace(app_request(row), running=False))
        else:
            continue
        acted += 1
        if acted == ORPHANS_PER_SWEEP:
            break
    return acted


def _app_left_running(row: Workload, seen: ObservedWorkload, before: datetime) -> bool:
    """An ended app whose backend still runs (or restarts) its replicas."""
    if row.state not in FINAL_STATES or row.state_changed_at > before:
        return False
    return seen.phase not in (Phase.STOPPED, Phase.STOPPING)


def _admit_waiting() -> None:
    waiting = (
        Workload.objects.filter(state__in=WAITING_STATES, admitted_at=None)
        .values_list("project_id", flat=True)
        .distinct()
    )
    for project_id in waiting:
        # Sent whatever the mark says: the sweep is the repair path, and a mark can belong to
        # a message lost with its worker (it would hold the queue until it expires).
        tasks.project_admit.delay(project_id)


def _refinalize() -> None:
    stale = Workload.objects.filter(
        state__in=FINAL_STATES,
        logs_archived=False,
        # A final row whose log is still not archived this long after it ended lost its task.
        state_changed_at__lt=timezone.now()
        - timedelta(seconds=settings.JOB_FINALIZE_GRACE_SECONDS),
    )
    for job_id, run in stale.values_list("pk", "run")[:100]:
        tasks.job_finalize.delay(str(job_id), run)
