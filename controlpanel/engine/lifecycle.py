"""How observations become workload states: the one place that moves `Workload.state`.

Every change is recorded as a JobEvent with its time and a human reason. Callers hold the row
lock (see reconcile.py), so two observers never record the same change twice. What an observed
phase means is the kind's (`target_states`: a job's run ends, a notebook stops and starts
again); the rest is shared.
"""

from __future__ import annotations

import re
from datetime import datetime

from django.dispatch import Signal
from django.utils import timezone

from controlpanel.engine.models import (
    FINAL_STATES,
    AppState,
    JobEvent,
    JobRun,
    JobState,
    Kind,
    NotebookState,
    Workload,
)
from controlpanel.engine.replicas import REPLICA_UIDS, record_replicas, serving_replicas
from deploy.types import ObservedWorkload, Phase
from training.protocol import parse_line

S = JobState
# Sent inside the transaction that records a final state, with `workload_id` and `run`: the
# task layer (tasks.py) finalizes the run once that transaction commits. The logic here never
# enqueues anything itself.
workload_ended = Signal()

_PHASE_STATES = {
    Phase.QUEUED: S.QUEUED,
    Phase.INITIALIZING: S.INITIALIZING,
    Phase.PENDING: S.PENDING,
    Phase.RUNNING: S.RUNNING,
    Phase.STOPPING: S.INTERRUPTING,
    Phase.FINALIZING: S.FINALIZING,
    Phase.SUCCEEDED: S.DONE,
    Phase.STOPPED: S.INTERRUPTED,
    Phase.SYNC_FAILED: S.SYNC_FAILED,
    Phase.ERROR: S.ERROR,
}


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
    if state in FINAL_STATES:
        # A run whose pod went away without a finish time (a stopped notebook's, an evicted
        # pod's) ends here: billing never meters an open run past its end.
        JobRun.objects.filter(job=job, run=job.run, finished_at=None).update(finished_at=now)
        _after_final(job)
    return True


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
    """The state(s) an observation leads to, in order, each with its reason."""
    if job.kind == Kind.NOTEBOOK:
        return notebook_states(job, observed)
    if job.kind == Kind.APP:
        return app_states(job, observed)
    phase = observed.phase
    if phase is Phase.FAILED:
        if observed.timed_out:
            return [
                (S.TIMEOUT, f"timeout of {job.timeout} s reached"),
                (S.INTERRUPTED, observed.reason or "stopped at the timeout"),
            ]
        return [(S.FAILED, _readable(observed.reason) or _exit_reason(observed.exit_code))]
    if phase is Phase.GONE:
        if job.launched_run >= job.run:
            return [(S.ERROR, "the workload disappeared from the cluster")]
        return []
    if phase is Phase.FINALIZING and observed.timed_out and job.state != S.FINALIZING:
        return [(S.TIMEOUT, f"timeout of {job.timeout} s reached"), (S.FINALIZING, observed.reason)]
    if phase is Phase.SUCCEEDED:
        return [(S.DONE, observed.reason or "exit code 0")]
    state = _PHASE_STATES[phase]
    if job.stop_requested and state in (S.QUEUED, S.INITIALIZING, S.PENDING, S.RUNNING):
        state = S.INTERRUPTING
    return [(state, observed.reason)]


def _readable(reason: str) -> str:
    """A failure reason ends with the process's last words; when those are the fine-tune
    image's `error` event (a JSON line), keep its message, not the JSON."""
    head, sep, last = reason.partition(": {")
    event = parse_line("{" + last) if sep else None
    if not event or event.get("event") != "error" or not event.get("message"):
        return reason
    return f"{head}: {event['message']}"


def _exit_reason(exit_code: int | None) -> str:
    return f"exit code {exit_code}" if exit_code is not None else "failed"


N = NotebookState
_NOTEBOOK_PHASES = {
    Phase.QUEUED: N.STARTING,
    Phase.INITIALIZING: N.STARTING,
    Phase.PENDING: N.STARTING,
    Phase.RUNNING: N.RUNNING,
    Phase.STOPPING: N.STOPPING,
    Phase.FINALIZING: N.STOPPING,
    Phase.SUCCEEDED: N.STOPPED,
    Phase.STOPPED: N.STOPPED,
    Phase.FAILED: N.FAILED,
    Phase.ERROR: N.ERROR,
}


def notebook_states(notebook: Workload, observed: ObservedWorkload) -> list[tuple[str, str]]:
    """A notebook runs until it is stopped: a stop it did not ask for is a failure, and a
    stopped server seen while the row wants it running is the previous start's (ignored:
    reconcile starts it)."""
    phase, reason = observed.phase, observed.reason
    if phase is Phase.GONE:
        if notebook.launched_run >= notebook.run and notebook.state != N.DELETING:
            return [(N.ERROR, "the notebook disappeared from the cluster")]
        return []
    if phase is Phase.SYNC_FAILED:
        return [(N.FAILED, f"the push of rw volumes failed, the workspace is kept: {reason}")]
    if phase is Phase.SUCCEEDED and not notebook.stop_requested:
        return [(N.FAILED, reason or "the notebook server exited")]
    state = _NOTEBOOK_PHASES[phase]
    if state in (N.STOPPING, N.STOPPED) and not notebook.stop_requested:
        return []
    if notebook.stop_requested and state in (N.STARTING, N.RUNNING):
        state = N.STOPPING
    if state == N.STOPPED:
        reason = reason or "stopped"
    return [(state, reason)]


A = AppState
_APP_PHASES = {
    Phase.QUEUED: A.QUEUED,
    Phase.INITIALIZING: A.INITIALIZING,
    Phase.PENDING: A.INITIALIZING,
    Phase.RUNNING: A.RUNNING,
    Phase.STOPPING: A.STOPPING,
    Phase.FINALIZING: A.STOPPING,
    Phase.SUCCEEDED: A.STOPPED,
    Phase.STOPPED: A.STOPPED,
    Phase.SYNC_FAILED: A.STOPPED,
    Phase.FAILED: A.FAILED,
    Phase.ERROR: A.ERROR,
}


def app_states(app: Workload, observed: ObservedWorkload) -> list[tuple[str, str]]:
    """An app serves until it is stopped: a server that exits on its own failed; RUNNING
    with fewer replicas ready than wanted is SCALING (a scale or a rolling update)."""
    phase, reason = observed.phase, observed.reason
    if phase is Phase.GONE:
        if app.launched_run >= app.run and app.state != A.DELETING:
            return [(A.ERROR, "the app disappeared from the cluster")]
        return []
    if phase is Phase.SUCCEEDED and not app.stop_requested:
        return [(A.FAILED, reason or "the server exited")]
    state = _APP_PHASES[phase]
    if state in (A.STOPPING, A.STOPPED) and not app.stop_requested:
        return []
    if app.stop_requested and state in (A.QUEUED, A.INITIALIZING, A.RUNNING):
        state = A.STOPPING
    if state == A.RUNNING and observed.replicas is not None:
        ready, wanted = observed.replicas
        if ready != wanted:
            return [(A.SCALING, f"{ready} of {wanted} replicas ready")]
        reason = f"{ready} replica{'s' if ready != 1 else ''} ready" if wanted else "scaled to zero"
    if state == A.STOPPED:
        reason = reason or "stopped"
    return [(state, reason)]


PUSH_RETRIED = "push retried by"  # the reason of the FINALIZING a retried push starts with


# Where a state lies within one run. An observation that leads below the row's state is
# older than what was recorded (a sweep's listing applied after the watcher moved on) and is
# ignored. PENDING and INITIALIZING share a rank: the pull runs after scheduling, and the
# user's image is pulled after it. Services move states by hand (stop, retry the push).
_RANKS = {
    S.QUEUED: 0,
    S.PENDING: 1,
    S.INITIALIZING: 1,
    S.RUNNING: 2,
    S.INTERRUPTING: 3,
    S.TIMEOUT: 3,
    S.FINALIZING: 3,
    **{state: 4 for state in FINAL_STATES},
}


_NOTEBOOK_RANKS = {
    N.STARTING: 0,
    N.RUNNING: 1,
    N.STOPPING: 2,
    N.DELETING: 3,
    **{state: 4 for state in (N.STOPPED, N.FAILED, N.ERROR)},
}


_APP_RANKS = {
    A.QUEUED: 0,
    A.INITIALIZING: 1,
    A.RUNNING: 2,
    A.SCALING: 2,
    A.STOPPING: 3,
    A.DELETING: 3,
    **{state: 4 for state in (A.STOPPED, A.FAILED, A.ERROR)},
}


def _rank(job: Workload, state: str) -> int:
    if job.kind == Kind.APP:
        return _APP_RANKS[A(state)]
    if job.kind == Kind.NOTEBOOK:
        return _NOTEBOOK_RANKS[N(state)]
    return _RANKS[S(state)]


def of_current_run(job: Workload, observed: ObservedWorkload) -> bool:
    """Whether an observation is of the row's current run. A notebook's objects keep one name
    across its starts (its ref's run is always 1): any observation of it is current."""
    return job.kind in (Kind.NOTEBOOK, Kind.APP) or observed.run == job.run


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
    if _retried_push_failed(job, observed):
        return False
    if is_behind(job, observed) and not (fresh and observed.phase is Phase.QUEUED):
        return False
    if observed.phase is not Phase.GONE and job.launched_run < job.run:
        # Its objects exist: the launch happened, though the reconcile that made them rolled
        # back (a worker killed mid-way). From now on it is collected and archived as launched.
        job.launched_run = job.run
        job.save(update_fields=["launched_run", "updated_at"])
    _record_times(job, observed)
    changed = False
    passed = passed_states(job, observed) if job.kind == Kind.JOB else []
    for state, reason, at in passed:
        changed = record_state(job, state, reason, at=at) or changed
    for state, reason in target_states(job, observed):
        if state in FINAL_STATES and observed.push_note:
            reason = f"{reason}; {observed.push_note}"  # conflicts of the final push
        changed = record_state(job, state, reason) or changed
        if state in FINAL_STATES:
            break
    return changed


def _retried_push_failed(job: Workload, observed: ObservedWorkload) -> bool:
    """The failure of a push that was since retried: until the task has started the next
    attempt, the cluster still shows the old one failed, which must not end the job again."""
    if job.state != S.FINALIZING or observed.phase is not Phase.SYNC_FAILED:
        return False
    retries = JobEvent.objects.filter(
        job=job, run=job.run, state=S.FINALIZING, reason__startswith=PUSH_RETRIED
    ).count()
    return observed.push_attempt <= retries


_BEFORE_RUNNING = (S.QUEUED, S.INITIALIZING, S.PENDING)
_AFTER_RUNNING = (Phase.FINALIZING, Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED, Phase.SYNC_FAILED)
_AFTER_PUSH = (Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED, Phase.SYNC_FAILED)


def passed_states(job: Workload, observed: ObservedWorkload) -> list[tuple[str, str, datetime]]:
    """RUNNING and FINALIZING that ended between two observations, at the pod's own times.

    Observation is level-triggered, so a short run or a quick push can be over before anyone
    looks; the timeline still shows that the container ran and that its volumes were pushed.
    """
    passed: list[tuple[str, str, datetime]] = []
    now = timezone.now()
    at = job.state_changed_at
    started = observed.started_at
    if started and observed.phase in _AFTER_RUNNING and job.state in _BEFORE_RUNNING:
        at = min(max(started, at), now)  # in order, whatever the node's clock says
        passed.append((S.RUNNING, "running", at))
    running = passed or job.state in (S.RUNNING, S.INTERRUPTING)
    if (
        observed.push_attempt
        and observed.phase in _AFTER_PUSH
        and running
        and not observed.timed_out
    ):
        at = min(max(observed.finished_at or at, at), now)
        passed.append((S.FINALIZING, f"pushing rw volumes (attempt {observed.push_attempt})", at))
    return passed


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
        record_replicas(job, observed.replica_runs)
    elif observed.run_uid and observed.started_at:
        JobRun.objects.update_or_create(
            uid=observed.run_uid,
            defaults={
                "job": job,
                "project_id": job.project_id,
                "run": job.run,
                "flavor_id": job.flavor_id,
                "units": job.gpu,
                "started_at": observed.started_at,
                "finished_at": observed.finished_at,
                "exit_code": observed.exit_code,
                "node": observed.node or "",
            },
        )
