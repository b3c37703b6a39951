"""A run that Kueue takes back to its queue (evicted, preempted) or a user stops: when its pods'
metering ends, and what the timeline says of the checkpoint the fine-tune saved on SIGTERM.

Metering: an evicted pod is billed to its own end, never to the moment the panel noticed the
requeue (up to a sweep later). Its end is the finish its pod reported when the pod is still
listed (recorded from the observation like any finish); a pod still terminating (saving its
checkpoint) stays metered until it ends; one gone without its end seen is billed to the
deadline of its deletion when it was seen terminating (its deletionTimestamp), else to Kueue's
eviction (its Workload's Evicted time, when its deletion began); never past the panel's now
(`replicas.gone_at`).

Timeline: the preset's `interrupted` event says why: "stopped by <user> at step N" for a stop,
"evicted by Kueue (<Kueue's reason>) at step N" for an eviction. When the line is collected
before the requeue is seen, the entry says "evicted at step N" and the requeue completes it.
"""

from __future__ import annotations

import re

from django.utils import timezone

from controlpanel.engine.models import JobEvent, JobRun, Workload
from controlpanel.engine.registry import kind_of
from controlpanel.engine.replicas import gone_at
from deploy.types import ObservedWorkload

SAVED = "its checkpoint is saved"
RESUMED = "resumed from step {step}"
_EVICTED = "evicted at step {step}: " + SAVED
_EVICTED_BY = "evicted by Kueue ({why}) at step {step}: " + SAVED
_STOPPED = "{who} at step {step}: " + SAVED
# The entry written before the requeue was seen, which the requeue completes.
_PLAIN = re.compile(r"^evicted at step (\d+): " + re.escape(SAVED) + "$")
# Kueue's reason as the waiting state says it (kueue_reasons.waiting_reason_of).
_KUEUE_WORDS = re.compile(r"^((?:preempted|evicted): .*?); back in ")


def end_evicted_runs(job: Workload, observed: ObservedWorkload) -> None:
    """Kueue took the run back to its queue: each of its open pod runs ends when its pod did
    (`replicas.gone_at`, the same rule as a replica gone unseen), each saved so the ledger
    records it (billing/receivers.py). A pod the observation still lists is left to it: its
    finish (or that it runs on, terminating) is recorded from it."""
    now = timezone.now()
    listed = {observed.run_uid} | {r.uid for r in observed.replica_runs or ()}
    for run in JobRun.objects.filter(job=job, finished_at=None).exclude(started_at=None):
        if run.uid in listed:
            continue
        run.finished_at = gone_at(run, now, evicted_at=observed.evicted_at)
        run.save()


def kueue_reason(waiting: str) -> str:
    """Kueue's words in a requeued job's waiting reason ("preempted: <message>"), else ""."""
    found = _KUEUE_WORDS.match(waiting)
    return found.group(1) if found else ""


def interrupted_entry(job: Workload, step: int) -> str:
    """The timeline's words for the preset's `interrupted` event of the job's current run."""
    if job.stop_requested:
        return _STOPPED.format(who=_who_stopped(job), step=step)
    why = kueue_reason(job.state_reason) if job.state == kind_of(job).waiting else ""
    if why:
        return _EVICTED_BY.format(why=why, step=step)
    return _EVICTED.format(step=step)


def name_eviction(job: Workload, waiting: str) -> None:
    """The requeue is seen: the run's entries written before it ("evicted at step N") say
    Kueue's reason now."""
    why = kueue_reason(waiting)
    if not why:
        return
    for event in JobEvent.objects.filter(job=job, run=job.run, reason__startswith="evicted at"):
        found = _PLAIN.match(event.reason)
        if found:
            event.reason = _EVICTED_BY.format(why=why, step=found.group(1))[:500]
            event.save(update_fields=["reason"])


def _who_stopped(job: Workload) -> str:
    """ "stopped by <user>" from the run's stopping entry, or the panel's own reason."""
    kind = kind_of(job)
    event = (
        JobEvent.objects.filter(job=job, run=job.run, state=kind.stopping)
        .order_by("pk")
        .only("reason")
        .first()
    )
    reason = event.reason if event is not None else ""
    prefix = kind.stop_reason.split("{user}")[0]
    if prefix and reason.startswith(prefix):
        return f"stopped by {reason[len(prefix) :]}"
    return f"stopped ({reason})" if reason else "stopped"
