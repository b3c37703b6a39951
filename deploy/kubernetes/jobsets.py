"""A job of several nodes (issue 29) on the cluster: its JobSet (JobSet v0.9.1,
`deploy.manifests.jobset`), read and mapped to the run's observation, stopped, listed.

The JobSet makes one child Job, `<job name>-node-0`, of `nodes` Indexed pods; a failed pod
fails that Job and JobSet restarts the whole group (a new child Job of the same name) until
`failurePolicy.maxRestarts`, so only the JobSet's own `Failed` condition is final. Billing
counts each pod as a run of its own (`replica_runs`: nodes x GPUs per node per minute). A
cluster without JobSet (its API answers 404) simply has none.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.kueue_reasons import JOB_UID_LABEL, evicted_at, waiting_reason_of
from deploy.kubernetes.observe import (
    JobObjects,
    _failure,
    _pod_progress,
    _with_pod_facts,
    gone,
    observe_job,
)
from deploy.kubernetes.observe_app import replica_run as pod_run
from deploy.kubernetes.pods import clip, condition, is_true, newest
from deploy.kubernetes.trust import controlled_by
from deploy.manifests.jobset import INDEX_ANNOTATION, MAX_GROUP_RESTARTS, REPLICATED_JOB
from deploy.types import ObservedWorkload, Phase, WorkloadKind, WorkloadRef

KIND = "JobSet"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
INACTIVE: Obj = {"spec": {"active": False}}
ENDED = ("Succeeded", "Failed")
# The least advanced node decides where the group is (all must run for RUNNING).
ORDER = (Phase.PENDING, Phase.INITIALIZING, Phase.RUNNING, Phase.FINALIZING)


def child_job_name(ref: WorkloadRef) -> str:
    """The child Job JobSet makes for the run: `<jobset>-<replicatedJob>-<job index>`."""
    return f"{names.job_name(ref)}-{REPLICATED_JOB}-0"


def list_jobsets(api: KubeApi, namespace: str | None, selector: str) -> list[Obj]:
    """The JobSets matching `selector`; none where the cluster serves no JobSet API."""
    try:
        items, _ = api.list(KIND, namespace, label_selector=selector)
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return items


def run_jobset(ref: WorkloadRef, jobsets: list[Obj]) -> Obj | None:
    """The run's JobSet, by the name Ajuste gives it."""
    wanted = names.job_name(ref)
    return next((j for j in jobsets if j["metadata"].get("name") == wanted), None)


def child_job(ref: WorkloadRef, jobset: Obj, jobs: list[Obj]) -> Obj | None:
    """The run's child Job: the JobSet's name for it, and the JobSet its controller."""
    wanted = child_job_name(ref)
    found = (j for j in jobs if j["metadata"].get("name") == wanted and controlled_by(j, jobset))
    return next(found, None)


def earlier_pods(ref: WorkloadRef, jobset: Obj, job: Obj | None, pods: list[Obj]) -> list[Obj]:
    """The run's pods of the JobSet's earlier attempts: a group restart deleted their child
    Job, and a healthy node's pod is still terminating (or just ended). Its own JobSet's
    (`jobset-uid`), of an attempt before the JobSet's `restarts`, controlled by a Job of the
    child's name that is not the current child. Billed until each ends, not until the panel
    sees it gone."""
    uid = jobset["metadata"].get("uid")
    restarts = int((jobset.get("status") or {}).get("restarts") or 0)
    return [p for p in pods if uid and _of_earlier_attempt(ref, p, uid, restarts, job)]


def _of_earlier_attempt(
    ref: WorkloadRef, pod: Obj, uid: str, restarts: int, job: Obj | None
) -> bool:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    attempt = str(labels.get(RESTART_LABEL, ""))
    if labels.get(JOBSET_UID_LABEL) != uid or not attempt.isdigit() or int(attempt) >= restarts:
        return False
    if labels.get(names.COMPONENT) != "main" or controlled_by(pod, job):
        return False
    owners = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
    return len(owners) == 1 and (owners[0].get("kind"), owners[0].get("name")) == (
        "Job",
        child_job_name(ref),
    )


def rank(pod: Obj) -> int:
    """The pod's node rank (its completion index)."""
    value = str((pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION, ""))
    return int(value) if value.isdigit() else -1


def rank_zero(pods: list[Obj]) -> list[Obj]:
    """The pods of node 0 (its log is the run's log)."""
    return [p for p in pods if rank(p) == 0]


def stop_patch(jobset: Obj, *, now: datetime | None = None) -> Obj:
    """Suspend the JobSet (JobSet deletes the running pods, gracefully) and say it was a stop.
    Not a deadline on the child Job: JobSet would restart the group. A suspended JobSet's
    stop names the resourceVersion it was decided on (Kueue may admit it meanwhile: 409)."""
    at = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch: Obj = {
        "metadata": {"annotations": {names.STOP_REQUESTED: at}},
        "spec": {"suspend": True},
    }
    if (jobset.get("spec") or {}).get("suspend"):
        patch["metadata"]["resourceVersion"] = jobset["metadata"]["resourceVersion"]
    return patch


def deactivate_workload(api: KubeApi, jobset: Obj) -> bool:
    """Kueue undoes a user's `suspend` on a JobSet it admitted (it starts what it admitted):
    a stop also deactivates the JobSet's Workload (`spec.active: false`), Kueue's own way to
    stop it, so Kueue evicts it and keeps it suspended. False where there is no Workload, no
    Kueue, or no right to patch it (the stop then rests on `suspend` alone)."""
    meta = jobset["metadata"]
    if not (meta.get("labels") or {}).get(QUEUE_LABEL) or not meta.get("uid"):
        return False
    try:
        items, _ = api.list(
            "Workload", meta["namespace"], label_selector=f"{JOB_UID_LABEL}={meta['uid']}"
        )
        for workload in items:
            api.patch("Workload", meta["namespace"], workload["metadata"]["name"], INACTIVE)
    except ApiException as exc:
        if exc.status in (403, 404):
            return False
        raise
    return bool(items)


def observe_jobset(
    ref: WorkloadRef, objects: JobObjects, *, created_at: datetime | None = None
) -> ObservedWorkload:
    """The observed phase of a run of several nodes, from its JobSet, child Job and pods."""
    jobset = objects.jobset or {}
    pods = [p for p in objects.pods if not p["metadata"].get("deletionTimestamp")]
    runs = tuple(r for r in map(pod_run, [*objects.pods, *objects.earlier]) if r is not None)
    base = gone(WorkloadKind.JOB, ref, run=ref.run, created_at=created_at, replica_runs=runs)
    failed = [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]
    observed = _with_pod_facts(base, newest(failed) or newest(rank_zero(pods)) or newest(pods))
    stopped = names.STOP_REQUESTED in (jobset["metadata"].get("annotations") or {})
    restarts = int((jobset.get("status") or {}).get("restarts") or 0)
    if is_true(jobset, "Completed"):
        return replace(observed, phase=Phase.SUCCEEDED, reason="exit code 0", exit_code=0)
    if is_true(jobset, "Failed"):
        if stopped:
            return replace(observed, phase=Phase.STOPPED, reason="stopped at the user's request")
        return _group_failed(observed, jobset, failed, restarts)
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ENDED]
    if stopped and (jobset.get("spec") or {}).get("suspend"):
        if not live:
            return replace(observed, phase=Phase.STOPPED, reason="stopped at the user's request")
        return replace(
            observed, phase=Phase.FINALIZING, reason=f"stopping ({len(live)} nodes left)"
        )
    if (jobset.get("spec") or {}).get("suspend"):
        queue = (jobset["metadata"].get("labels") or {}).get(QUEUE_LABEL)
        reason = waiting_reason_of(objects.workload, queue)
        return replace(
            observed,
            phase=Phase.QUEUED,
            reason=clip(reason),
            evicted_at=evicted_at(objects.workload),
        )
    return _group_progress(observed, objects, live, failed, restarts)


def _group_failed(
    observed: ObservedWorkload, jobset: Obj, failed: list[Obj], restarts: int
) -> ObservedWorkload:
    """Failed for good: the restarts are spent (or the policy allows none)."""
    pod = newest(failed)
    detail = _failure(pod, observed, None).reason if pod else ""
    if not detail:
        detail = str((condition(jobset, "Failed") or {}).get("message") or "the JobSet failed")
    elif pod is not None:
        detail = f"node {rank(pod)}: {detail}"
    after = f"after {restarts} group restart{'s' if restarts != 1 else ''}"
    return replace(observed, phase=Phase.FAILED, reason=clip(f"{detail} ({after})"))


def _group_progress(
    observed: ObservedWorkload,
    objects: JobObjects,
    live: list[Obj],
    failed: list[Obj],
    restarts: int,
) -> ObservedWorkload:
    """Where the group is: RUNNING once every node runs; a node that failed while restarts
    are left means the group restarts (never final)."""
    nodes = int(((objects.job or {}).get("spec") or {}).get("completions") or len(live) or 1)
    restarting = (
        f"the group restarts after a node failed (restart {restarts} of {MAX_GROUP_RESTARTS})"
    )
    if failed or (restarts and len(live) < nodes):
        return replace(observed, phase=Phase.RUNNING, reason=restarting)
    if len(live) < nodes:
        started = f"{len(live)} of {nodes} nodes started"
        return replace(observed, phase=Phase.PENDING, reason=f"creating the pods ({started})")
    steps = sorted(
        ((_pod_progress(p, observed, objects.events), rank(p)) for p in live),
        key=lambda item: ORDER.index(item[0].phase) if item[0].phase in ORDER else 0,
    )
    least, node = steps[0]
    reason = f"running on {nodes} nodes" if least.phase is Phase.RUNNING else least.reason
    if least.phase is not Phase.RUNNING:
        reason = f"node {node}: {reason}"
    elif restarts:
        reason += f" (group restart {restarts} of {MAX_GROUP_RESTARTS})"
    if restarts and ORDER.index(least.phase) < ORDER.index(Phase.RUNNING):
        # The group ran before: a restart is not a way back to PENDING.
        return replace(observed, phase=Phase.RUNNING, reason=clip(f"{restarting}; {reason}"))
    return replace(observed, phase=least.phase, reason=clip(reason))


def observe_run(
    ref: WorkloadRef, objects: JobObjects, *, created_at: datetime | None = None
) -> ObservedWorkload:
    """A job run's observation: its JobSet's where it has one, its Job's otherwise."""
    if objects.jobset is not None:
        return observe_jobset(ref, objects, created_at=created_at)
    return observe_job(ref, objects, created_at=created_at)
