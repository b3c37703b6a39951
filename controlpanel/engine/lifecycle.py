"""How observations become workload states: the one place that moves `Workload.state`.

Every change is recorded as a JobEvent with its time and a human reason. Callers hold the row
lock (see reconcile.py), so two observers never record the same change twice. What an observed
phase means is the kind's (its driver's `targets`: a job's run ends, a notebook stops and starts
again); the rest is shared.
"""

from __future__ import annotations

import re
from datetime import datetime

from django.conf import settings
from django.dispatch import Signal
from django.utils import timezone

from controlpanel.engine.evictions import end_evicted_runs, name_eviction
from controlpanel.engine.models import FINAL_STATES, JobEvent, JobRun, Workload
from controlpanel.engine.registry import kind_of
from controlpanel.engine.replicas import REPLICA_UIDS, record_replicas, serving_replicas
from controlpanel.streams import channels
from deploy.types import ObservedWorkload, Phase

# Sent inside the transaction that records a final state, with `workload_id` and `run`: the
# task layer (tasks.py) finalizes the run once that transaction commits. The logic here never
# enqueues anything itself.
workload_ended = Signal()


def record_state(
    job: Workload, state: str, reason: str = "", *, at: datetime | None = None
) -> bool:
    """Move the job to `state` (saving it) and keep the change; False if nothing changed.

    A new reason within the same state is kept too (`_new_reason`): "why was it pending for
    two hours" is answered after the fact."""
    reason = reason[:500]
    if job.state == state and (not reason or job.state_reason == reason):
        return False  # an empty reason never erases a known one
    now = at or timezone.now()
    if job.state != state:
        JobEvent.objects.create(job=job, run=job.run, state=state, reason=reason, at=now)
        job.state_changed_at = now
    elif _new_reason(job, state, reason):
        JobEvent.objects.create(job=job, run=job.run, state=state, reason=reason, at=now)
    job.state = state
    job.state_reason = reason
    job.save(update_fields=["state", "state_reason", "state_changed_at", "updated_at"])
    channels.state_recorded(
        workload_id=job.pk,
        project_id=job.project_id,
        run=job.run,
        state=state,
        reason=reason,
        at=job.state_changed_at,
        final=state in FINAL_STATES,
    )
    if state in FINAL_STATES:
        # A run whose pod went away without a finish time (a stopped notebook's, an evicted
        # pod's) ends here: billing never meters an open run past its end.
        JobRun.objects.filter(job=job, run=job.run, finished_at=None).update(finished_at=now)
        _after_final(job)
    return True


def record_launch(job: Workload) -> None:
    """The current run is handed to the backend (its objects are made, or exist): a GONE
    observation of it from now on means they were lost."""
    if job.launched_run < job.run:
        job.launched_run = job.run
        job.save(update_fields=["launched_run", "updated_at"])


def end_runs(job: Workload) -> None:
    """Its objects are all gone (deleted): the workload's open runs end now, each saved so the
    ledger records it (billing/receivers.py); they outlive the row, for billing."""
    now = timezone.now()
    for run in JobRun.objects.filter(job=job, finished_at=None).exclude(started_at=None):
        run.finished_at = max(now, run.started_at or now)
        run.save()


# Reason events one run may add within one state: a reason that flips back and forth (a
# queue position between two quotas, a scheduler's changing verdict) stops being recorded
# there; the row keeps the latest reason all the same.
REASONS_PER_STATE = 20
_COUNTERS = re.compile(r"\d+")


def reason_shape(reason: str) -> str:
    """The reason with its numbers blanked: "0/3 nodes are available: 3 Insufficient ..." and
    "0/4 nodes ...: 4 Insufficient ...", or "position 2" and "position 1", say the same."""
    return _COUNTERS.sub("#", reason)


def _new_reason(job: Workload, state: str, reason: str) -> bool:
    """Whether a reason within the same state is news: it differs from the run's last event
    by more than counters and times, and the state has not said too much already."""
    events = JobEvent.objects.filter(job=job, run=job.run)
    last = events.order_by("-pk").only("state", "reason").first()
    if (
        last is not None
        and last.state == state
        and reason_shape(last.reason) == reason_shape(reason)
    ):
        return False
    return events.filter(state=state).count() <= REASONS_PER_STATE


def _after_final(job: Workload) -> None:
    """Say that a run ended (the task layer finalizes it: notice, quota, log archive)."""
    workload_ended.send(sender=Workload, workload_id=str(job.id), run=job.run)


def target_states(job: Workload, observed: ObservedWorkload) -> list[tuple[str, str]]:
    """The state(s) an observation leads to, in order, each with its reason (the kind's)."""
    return kind_of(job).driver.targets(job, observed)


def _rank(job: Workload, state: str) -> int:
    """Where a state lies within one run. An observation that leads below the row's state is
    older than what was recorded (a sweep's listing applied after the watcher moved on) and is
    ignored. Services move states by hand (stop, retry the push)."""
    return kind_of(job).ranks[state]


def of_current_run(job: Workload, observed: ObservedWorkload) -> bool:
    """Whether an observation is of the row's current run. The objects of a kind that keeps
    one name across its runs (its ref's run is always 1): any observation of them is current."""
    return kind_of(job).one_name or observed.run == job.run


def is_behind(job: Workload, observed: ObservedWorkload | list[tuple[str, str]]) -> bool:
    """Whether an observation of the job's run (or the `target_states` it leads to) would
    take the run back to an earlier state."""
    if isinstance(observed, ObservedWorkload):
        observed = target_states(job, observed) if of_current_run(job, observed) else []
    return bool(observed) and _rank(job, observed[-1][0]) < _rank(job, job.state)


def apply_observation(job: Workload, observed: ObservedWorkload, *, fresh: bool = False) -> bool:
    """Record what the backend saw of the job's current run; True when the state changed.

    `fresh`: read under the row's lock, so newer than anything recorded: only such a read may
    take a run back to QUEUED (Kueue suspended the Job again to let another run first)."""
    if not of_current_run(job, observed) or job.state in FINAL_STATES:
        return False
    driver = kind_of(job).driver
    if driver.stale(job, observed):
        return False
    if is_behind(job, observed) and not (fresh and observed.phase is Phase.QUEUED):
        return False
    requeued = observed.phase is Phase.QUEUED and is_behind(job, observed)
    if requeued or observed.evicted_at is not None:
        # Kueue took the run back to its queue (preempted, or suspended to let another run
        # first): its pods end, and so does their metering, each at its pod's own end
        # (evictions.py); re-admitted, it is a new pod.
        end_evicted_runs(job, observed)
    if requeued:
        name_eviction(job, observed.reason)
        evictions = JobRun.objects.filter(job=job, run=job.run).exclude(started_at=None).count()
        if evictions > settings.QUEUE_MAX_EVICTIONS:
            return record_state(
                job,
                kind_of(job).failed,
                f"evicted {evictions} {'time' if evictions == 1 else 'times'}, more than the "
                "site allows a run "
                f"(QUEUE_MAX_EVICTIONS={settings.QUEUE_MAX_EVICTIONS}); the last time: "
                f"{observed.reason}",
            )
    if observed.phase is not Phase.GONE:
        # Its objects exist: the launch happened, though the reconcile that made them may have
        # rolled back (a worker killed mid-way). From now on it is collected and archived as
        # launched.
        record_launch(job)
    _record_times(job, observed)
    changed = False
    for state, reason, at in driver.passed(job, observed):
        changed = record_state(job, state, reason, at=at) or changed
    for state, reason in target_states(job, observed):
        if state in FINAL_STATES and observed.push_note:
            reason = f"{reason}; {observed.push_note}"  # conflicts of the final push
        changed = record_state(job, state, reason) or changed
        if state in FINAL_STATES:
            break
    return changed


def _has_served(job: Workload, observed: ObservedWorkload) -> bool:
    """Whether the app serves now or served in this run (its replicas bill from then on)."""
    running = kind_of(job).running
    if observed.phase is Phase.RUNNING or job.state == running:
        return True
    return JobEvent.objects.filter(job=job, run=job.run, state=running).exists()


def _record_times(job: Workload, observed: ObservedWorkload) -> None:
    """Container start/finish and exit code from the pod status (billing meters from these),
    and where a notebook is served."""
    fields = {
        "started_at": observed.started_at,
        "finished_at": observed.finished_at,
        "exit_code": observed.exit_code,
        "url": observed.url,
        # The later of the server's activity and a "keep it running" (which the server never
        # saw): an older observation must not undo the user's click.
        "last_activity_at": max(
            (t for t in (observed.last_activity, job.last_activity_at) if t is not None),
            default=None,
        ),
    }
    changed = [
        name for name, value in fields.items() if value is not None and getattr(job, name) != value
    ]
    for name in changed:
        setattr(job, name, fields[name])
    if observed.replicas is not None and job.progress.get("replicas") != list(observed.replicas):
        job.progress = {**job.progress, "replicas": list(observed.replicas)}
        changed.append("progress")
    if observed.replica_runs is not None:
        uids = serving_replicas(observed)
        if job.progress.get(REPLICA_UIDS) != uids:
            job.progress = {**job.progress, REPLICA_UIDS: uids}
            changed.append("progress")
    if changed:
        job.save(update_fields=[*dict.fromkeys(changed), "updated_at"])
    if observed.replica_runs is not None:
        record_replicas(job, observed.replica_runs, serving=_has_served(job, observed))
    elif observed.run_uid and observed.started_at:
        defaults = {
            "job": job,
            "project_id": job.project_id,
            "run": job.run,
            "flavor_id": job.flavor_id,
            "units": job.gpu,
            "started_at": observed.started_at,
            "finished_at": observed.finished_at,
            "exit_code": observed.exit_code,
            "node": observed.node or "",
        }
        if observed.ends_by is not None:  # being deleted: gone by then (replicas.gone_at)
            defaults["ends_by"] = observed.ends_by
        JobRun.objects.update_or_create(uid=observed.run_uid, defaults=defaults)
