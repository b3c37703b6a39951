"""The periodic sweep: list every workload the backend has, compare with the live rows of
every kind, and reconcile what differs. Together with the watch (or alone) it converges: a
lost task, a missed event or a worker crash is repaired within one sweep period.

It records what it sees and returns what should happen next (`Sweep`): the task layer
(tasks.sweep_now) sends the tasks, as DESIGN.md's one-way rule wants."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from controlpanel.engine.admission import WAITING_STATES
from controlpanel.engine.backend import get_backend
from controlpanel.engine.lifecycle import is_behind, target_states
from controlpanel.engine.models import DELETING, FINAL_STATES, LIVE_STATES, Workload
from controlpanel.engine.orphans import collect_unknown, unknown
from controlpanel.engine.reconcile import observe
from controlpanel.engine.registry import kinds
from controlpanel.engine.replicas import REPLICA_UIDS, serving_replicas
from controlpanel.projects.models import Project
from deploy.types import ObservedWorkload, Phase

log = logging.getLogger(__name__)
ORPHANS_PER_SWEEP = 100  # each costs a few API calls; the rest wait for the next sweep
# Sent by every sweep with the run UIDs (`uids`) of the pods it listed alive (started, not
# finished) and the time the listing began (`at`): billing notes when each run was last seen,
# so a run whose pod vanishes is closed there (billing/receivers.py).
runs_seen = Signal()


@dataclass
class Sweep:
    """What one sweep counted, and what the task layer must send: a reconcile for each admitted
    run whose task was lost (`redrive`), an admission pass for each project with waiting work
    (`admit`), a finalize for each ended run whose finalize was lost (`finalize`)."""

    counts: dict[str, int]
    redrive: list[str] = field(default_factory=list)
    admit: list[int] = field(default_factory=list)
    finalize: list[tuple[str, int]] = field(default_factory=list)


def sweep() -> Sweep:
    # Keyed by namespace too: a run counts only in its own project's namespace, whatever an
    # object elsewhere claims with our labels (the backend drops those as well).
    listed_at = timezone.now()
    observed = {(o.kind.value, o.namespace, o.id, o.run): o for o in get_backend().observe_all()}
    alive = [uid for o in observed.values() for uid in _alive(o)]
    runs_seen.send(sender=Workload, uids=alive, at=listed_at)
    counts = {"live": 0, "changed": 0, "relaunched": 0, "missing": 0, "orphans": 0}
    result = Sweep(counts)
    jobs = _live_jobs()
    namespaces = _namespaces({job.project_id for job in jobs})
    for job in jobs:
        counts["live"] += 1
        key = (job.kind, namespaces[job.project_id], str(job.pk), job.backend_run)
        seen = observed.pop(key, None)
        if seen is None:
            _missing(job, result)
        elif _differs(job, seen):
            observe(str(job.pk), seen)
            counts["changed"] += 1
    counts["orphans"] = _orphans(list(observed.values()))
    result.admit = _waiting_projects()
    result.finalize = _unfinalized()
    return result


def _orphans(leftovers: list[ObservedWorkload]) -> int:
    """What no live row claimed: runs no row names at all go to orphans.py (noted, stopped
    after a grace, their workspace deleted after a longer one); each kind acts on the runs of
    its rows that ended or moved on. Objects made before install ids (`unlabelled`) are left
    out: nothing says whose they are, so no install deletes them."""
    leftovers = [o for o in leftovers if not o.unlabelled]
    rows = rows_of(leftovers)
    strays = [o for o in leftovers if unknown(o, rows.get(o.id))]
    acted = collect_unknown(strays, budget=ORPHANS_PER_SWEEP)
    claimed = [o for o in leftovers if not unknown(o, rows.get(o.id))]
    for kind in kinds():
        mine = [o for o in claimed if o.kind.value == kind.name]
        acted += kind.driver.orphans(mine) if mine else 0
    return acted


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
    specs = {kind.name: kind for kind in kinds()}
    if observed.kind.value not in specs:
        return False
    rows = Workload.objects.select_related("project", "flavor").filter(
        pk=job_id, kind=observed.kind.value, state__in=LIVE_STATES
    )
    if not specs[observed.kind.value].one_name:
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


def _missing(job: Workload, result: Sweep) -> None:
    if job.launched_run < job.run or job.state == DELETING:
        # Admitted, never launched (or a deletion to finish): the task was lost. Sent again
        # by the task layer, spaced out per row (tasks.redrive).
        result.redrive.append(str(job.pk))
    else:
        observe(str(job.pk))  # look again, alone: it may have been created after the list
        result.counts["missing"] += 1


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
    if seen.replica_runs is not None and any(r.ends_by for r in seen.replica_runs):
        return True  # a pod being deleted: its run keeps when it will be gone (replicas.py)
    if seen.ends_by is not None and seen.run_uid and not seen.finished_at:
        return True  # the run's pod being deleted (evicted): likewise (replicas.gone_at)
    if not targets:
        return False
    state, reason = targets[-1]
    return state != job.state or bool(reason and reason != job.state_reason)


def grace_start() -> datetime:
    """Objects made, or rows ended, after this are too young for the orphan collectors (a row
    read before a commit must not cost a run): JOB_ORPHAN_GRACE_SECONDS ago."""
    return timezone.now() - timedelta(seconds=settings.JOB_ORPHAN_GRACE_SECONDS)


def settled(observations: list[ObservedWorkload]) -> list[ObservedWorkload]:
    """The leftovers old enough for a kind's orphan collector to act on (`grace_start`)."""
    before = grace_start()
    return [o for o in observations if o.created_at is None or o.created_at <= before]


def rows_of(observations: list[ObservedWorkload]) -> dict[str, Workload]:
    """The rows (any state) the observations' ids name, by id, with project and flavor."""
    ids = set()
    for seen in observations:
        try:
            ids.add(uuid.UUID(seen.id))
        except ValueError:
            continue  # not a workload id: no row
    rows = Workload.objects.filter(pk__in=ids).select_related("project", "flavor")
    return {str(row.pk): row for row in rows}


def _waiting_projects() -> list[int]:
    """Every project with work waiting for admission: the task layer sends each a pass
    whatever the queued-admission mark says (the sweep is the repair path, and a mark can
    belong to a message lost with its worker)."""
    waiting = Workload.objects.filter(state__in=WAITING_STATES, admitted_at=None)
    return list(waiting.values_list("project_id", flat=True).distinct())


def _unfinalized() -> list[tuple[str, int]]:
    """Final rows whose log is still not archived this long after they ended: their finalize
    task was lost."""
    stale = Workload.objects.filter(
        state__in=FINAL_STATES,
        logs_archived=False,
        state_changed_at__lt=timezone.now()
        - timedelta(seconds=settings.JOB_FINALIZE_GRACE_SECONDS),
    )
    return [(str(pk), run) for pk, run in stale.values_list("pk", "run")[:100]]
