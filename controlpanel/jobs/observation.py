"""What an observation of a job's run means for its states: a run ends (DONE, FAILED, a timeout
INTERRUPTED, SYNC_FAILED when its final push failed), a short run seen only once it ended still
shows that it ran and pushed, and the old failure of a push retried since is not applied."""

from __future__ import annotations

import json
import re
from datetime import datetime

from django.utils import timezone

from controlpanel.engine.models import JobEvent, Workload
from controlpanel.jobs.states import JobState as S
from deploy.types import ObservedWorkload, Phase
from training.protocol import parse_line

PUSH_RETRIED = "push retried by"  # the reason of the FINALIZING a retried push starts with

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


def job_states(job: Workload, observed: ObservedWorkload) -> list[tuple[str, str]]:
    """The state(s) an observation of the job's run leads to, in order, each with its reason."""
    phase = observed.phase
    if phase is Phase.FAILED:
        if observed.timed_out:
            return [
                (S.TIMEOUT, f"timeout of {job.timeout} s reached"),
                (S.INTERRUPTED, observed.reason or "stopped at the timeout"),
            ]
        return [(S.FAILED, _readable(observed.reason, job) or _exit_reason(observed.exit_code))]
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


def _readable(reason: str, job: Workload | None = None) -> str:
    """A failure reason ends with the process's last words; when those are the fine-tune
    image's `error` event (a JSON line, often clipped to fit), the reason is its message, never
    the JSON: read from the line, else from the run's progress snapshot, else left out."""
    head, sep, last = reason.partition(": {")
    if not sep or not _ERROR_EVENT.match("{" + last):
        return reason
    message = _event_message("{" + last) or _snapshot_message(job)
    return f"{head}: {message}" if message else head


_ERROR_EVENT = re.compile(r'\{\s*"event"\s*:\s*"error"')
_MESSAGE = re.compile(r'"message"\s*:\s*(?=")')


def _event_message(line: str) -> str:
    """The top-level message of an `error` event's line, whole or clipped after the message."""
    event = parse_line(line)
    if event is not None:
        message = event.get("message")
        return message.strip() if isinstance(message, str) else ""
    # Clipped: the first "message" before the "errors" list is the event's own.
    found = _MESSAGE.search(line.split('"errors"', 1)[0])
    if found is None:
        return ""
    try:
        message, _end = json.JSONDecoder().raw_decode(line, found.end())
    except ValueError:
        return ""  # the message itself was cut
    return message.strip() if isinstance(message, str) else ""


def _snapshot_message(job: Workload | None) -> str:
    progress = job.progress if job is not None and isinstance(job.progress, dict) else {}
    message = progress.get("message") if progress.get("last_event") == "error" else None
    return message.strip() if isinstance(message, str) else ""


def _exit_reason(exit_code: int | None) -> str:
    return f"exit code {exit_code}" if exit_code is not None else "failed"


def retried_push_failed(job: Workload, observed: ObservedWorkload) -> bool:
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
