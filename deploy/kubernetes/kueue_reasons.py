"""Why a Job waits in Kueue, in the timeline's words, from its Workload's conditions
(QuotaReserved, Admitted, Evicted, Preempted and their messages, Kueue v0.19.2)."""

from __future__ import annotations

from datetime import datetime

from kubernetes.client.exceptions import ApiException

from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.pods import parse_time

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def job_workload(api: KubeApi, job: Obj | None) -> Obj | None:
    """The Workload Kueue made for a suspended, queued Job (found by the Job's uid label);
    None for a running Job, one without a queue, or before Kueue made it."""
    if job is None or not (job.get("spec") or {}).get("suspend"):
        return None
    meta = job["metadata"]
    if not (meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name") or not meta.get("uid"):
        return None
    selector = f"{JOB_UID_LABEL}={meta['uid']}"
    try:
        items, _ = api.list("Workload", meta["namespace"], label_selector=selector)
    except ApiException as exc:
        if exc.status in (403, 404):  # no Kueue here, or no right to read it: a plain reason
            return None
        raise
    return items[0] if items else None


def _condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _true(obj: Obj, kind: str) -> Obj | None:
    cond = _condition(obj, kind)
    return cond if cond is not None and cond.get("status") == "True" else None


def waiting_reason_of(workload: Obj | None, queue: str | None) -> str:
    """The reason a suspended Job shows: evicted or preempted with Kueue's message, waiting for
    quota with Kueue's message, or waiting for admission by its queue."""
    where = f"Kueue queue {queue}" if queue else "the cluster's queue"
    if workload is None:
        return f"waiting for admission by {where}"
    evicted = _true(workload, "Evicted")
    if evicted is not None:
        preempted = _true(workload, "Preempted")
        word = "preempted" if preempted or evicted.get("reason") == "Preempted" else "evicted"
        message = (preempted or evicted).get("message") or evicted.get("reason") or ""
        return f"{word}: {message}; back in {where}, it resumes from its last checkpoint"
    reserved = _condition(workload, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "False" and reserved.get("message"):
        return f"waiting in {where}: {reserved['message']}"
    return f"waiting for admission by {where}"


def evicted_at(workload: Obj | None) -> datetime | None:
    """When Kueue evicted the run (its Workload's Evicted condition turned True): the pods it
    admitted were deleted then, so one gone without its end seen ended no later than its
    grace period after this, and was billed up to here at the least. None if not evicted."""
    evicted = _true(workload, "Evicted") if workload is not None else None
    return parse_time(evicted.get("lastTransitionTime")) if evicted is not None else None
