"""Map an app's objects (its Deployment, ReplicaSets and pods, as dicts) to its
`ObservedWorkload`, and each of its pods (or a job node's) to the `ReplicaRun` billing meters.
Pure, like `observe`: the backend lists, this decides."""

from __future__ import annotations

from dataclasses import replace

from deploy import names
from deploy.kubernetes.api import Obj
from deploy.kubernetes.observe import _last_exit_code, _with_pod_facts, gone
from deploy.kubernetes.pods import (
    clip,
    condition,
    container_run,
    container_status,
    last_line,
    newest,
    parse_time,
    unscheduled_reason,
    waiting_reason,
)
from deploy.types import ObservedWorkload, Phase, ReplicaRun, WorkloadKind, WorkloadRef

# The label the ReplicaSet controller adds to a Deployment's pod template.
POD_TEMPLATE_HASH = "pod-template-hash"


def observe_app(
    ref: WorkloadRef,
    deployment: Obj | None,
    replica_sets: list[Obj],
    pods: list[Obj],
    events: list[Obj],
) -> ObservedWorkload:
    """An app: RUNNING while a replica serves, with `replicas` (ready pods of the current
    template, replicas wanted), so the panel tells SCALING (a scale or a rolling update)
    from RUNNING; STOPPED at zero replicas with the stop annotation and no pod left (zero
    without it is an autoscaler's scale to zero: still RUNNING). `replica_sets` and `pods` are
    the Deployment's own (`trust`); `events` those of the newest pod when it is unscheduled."""
    base = gone(WorkloadKind.APP, ref)
    if deployment is None:
        return replace(base, reason="no object of this app exists", replica_runs=())
    meta = deployment["metadata"]
    base = replace(
        base,
        url=(meta.get("annotations") or {}).get(names.URL),
        replica_runs=tuple(run for run in map(replica_run, pods) if run is not None),
    )
    spec = deployment.get("spec") or {}
    wanted = int(spec.get("replicas", 1))
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if (meta.get("annotations") or {}).get(names.STOPPED) == "true":
        if not pods:
            return replace(base, phase=Phase.STOPPED, reason="stopped", replicas=(0, 0))
        return replace(base, phase=Phase.STOPPING, reason=f"stopping ({len(pods)} left)")
    current = _current_pods(spec.get("template") or {}, replica_sets, live)
    ready = [p for p in current if _serving(p)]
    serving = [p for p in live if _serving(p)]
    observed = replace(base, replicas=(len(ready), wanted))
    if serving:
        oldest = min(serving, key=lambda p: p["metadata"].get("creationTimestamp") or "")
        return replace(_with_pod_facts(observed, oldest), phase=Phase.RUNNING, reason="ready")
    if not live and wanted == 0:
        return replace(observed, phase=Phase.RUNNING, reason="scaled to zero")
    # A pod that ended (evicted) is replaced by its ReplicaSet: the replacement tells more.
    active = [
        p for p in live if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    pod = newest([p for p in current if p in active]) or newest(active) or newest(live)
    if pod is None:
        return _no_pod(observed, deployment, replica_sets)
    return _app_progress(pod, _with_pod_facts(observed, pod), events)


def replica_run(pod: Obj) -> ReplicaRun | None:
    """A replica as billing sees it, once its server has started: a pod stopping (deleted,
    scaled down) is billed until it is gone, a crash-looping one while it holds its GPUs
    (from its earliest start the panel saw); it ends with its pod (Succeeded or Failed), at
    its server's end. A pod being deleted ends by its deletionTimestamp (`ends_by`), or when
    its container has ended: the kubelet starts nothing again in a pod on its way out."""
    status = container_status(pod, "main") or {}
    main = container_run(status)
    started = main.started_at or container_run({"state": status.get("lastState") or {}}).started_at
    uid = pod["metadata"].get("uid")
    if started is None or not uid:
        return None
    ends_by = parse_time(pod["metadata"].get("deletionTimestamp"))
    ended = ends_by is not None and main.finished_at is not None
    if ((pod.get("status") or {}).get("phase")) not in ("Succeeded", "Failed") and not ended:
        node = (pod.get("spec") or {}).get("nodeName")
        return ReplicaRun(uid=str(uid), started_at=started, node=node, ends_by=ends_by)
    if main.finished_at is None:
        return None  # ended without saying when (evicted): the panel ends it as it notices
    return ReplicaRun(
        uid=str(uid),
        started_at=started,
        finished_at=main.finished_at,
        exit_code=main.exit_code,
        node=(pod.get("spec") or {}).get("nodeName"),
    )


def _current_pods(template: Obj, replica_sets: list[Obj], pods: list[Obj]) -> list[Obj]:
    """The pods of the ReplicaSet whose template is the Deployment's (the controller's own
    rule: equal once its `pod-template-hash` label is set aside)."""
    current = [rs["metadata"].get("uid") for rs in replica_sets if _same_template(rs, template)]
    return [p for p in pods if any(_controller_uid(p) == uid for uid in current)]


def _same_template(replica_set: Obj, template: Obj) -> bool:
    theirs = ((replica_set.get("spec") or {}).get("template")) or {}
    labels = dict((theirs.get("metadata") or {}).get("labels") or {})
    labels.pop(POD_TEMPLATE_HASH, None)
    theirs = {**theirs, "metadata": {**(theirs.get("metadata") or {}), "labels": labels}}
    ours = {**template, "metadata": {**(template.get("metadata") or {})}}
    ours["metadata"]["labels"] = dict(ours["metadata"].get("labels") or {})
    return bool(theirs == ours)


def _controller_uid(obj: Obj) -> str | None:
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return str(owner.get("uid"))
    return None


def _serving(pod: Obj) -> bool:
    """The server answers its readiness probe."""
    status = (pod.get("status") or {}).get("phase")
    return status == "Running" and bool((container_status(pod, "main") or {}).get("ready"))


def _no_pod(
    observed: ObservedWorkload, deployment: Obj, replica_sets: list[Obj]
) -> ObservedWorkload:
    """Pods wanted, none made yet: the controllers say why (quota...)."""
    for obj in [deployment, *replica_sets]:
        failure = condition(obj, "ReplicaFailure")
        if failure and failure.get("status") == "True":
            refused = clip(f"cannot create the pods: {failure.get('message') or ''}")
            return replace(observed, phase=Phase.PENDING, reason=refused)
    return replace(observed, phase=Phase.PENDING, reason="waiting for the pods to be created")


def _app_progress(pod: Obj, observed: ObservedWorkload, events: list[Obj]) -> ObservedWorkload:
    """Where the newest pod is while no replica serves."""
    unscheduled = unscheduled_reason(pod, events)
    if unscheduled:
        return replace(observed, phase=Phase.PENDING, reason=unscheduled)
    status = container_status(pod, "pull", init=True)
    pull = container_run(status)
    if pull.state == "running":
        return replace(observed, phase=Phase.INITIALIZING, reason="pulling the model")
    if pull.reason == "CrashLoopBackOff":  # the kubelet retries a failed pull: the last one
        pull = container_run({"state": (status or {}).get("lastState") or {}})
    if pull.state == "terminated" and pull.exit_code:
        detail = last_line(pull.message) or f"exit code {pull.exit_code}"
        return replace(observed, phase=Phase.FAILED, reason=clip(f"model pull failed: {detail}"))
    main = container_run(container_status(pod, "main"))
    if main.state == "running":
        return replace(observed, phase=Phase.INITIALIZING, reason="loading the model")
    if main.reason == "CrashLoopBackOff" or main.state == "terminated":
        code = main.exit_code if main.exit_code is not None else _last_exit_code(pod)
        reason = f"the server exits (exit code {code})"
        if main.reason == "OOMKilled":
            reason += " (out of memory)"
        return replace(observed, phase=Phase.FAILED, exit_code=code, reason=reason)
    return replace(observed, phase=Phase.PENDING, reason=waiting_reason(main, what="the server"))
