"""Map our objects (as dicts) to `ObservedWorkload`s. Pure: the backend lists, this decides.

A job run is its Job (`component=main`), the Job's pods, and the finalize push Jobs with their
pods. The user's container is `main`; `pull` and `push` are the sync containers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime

from deploy import names
from deploy.kubernetes.api import Obj
from deploy.kubernetes.kueue_reasons import evicted_at, waiting_reason_of
from deploy.kubernetes.pods import (
    ContainerRun,
    clip,
    condition,
    container_run,
    container_status,
    is_true,
    last_line,
    latest_event,
    newest,
    parse_time,
    unscheduled_reason,
    waiting_reason,
)
from deploy.types import ObservedWorkload, Phase, ReplicaRun, WorkloadKind, WorkloadRef
from storage.sync.stats import conflict_note


@dataclass(frozen=True)
class JobObjects:
    """Everything listed for one job run."""

    job: Obj | None
    pods: list[Obj] = field(default_factory=list)
    push_jobs: list[Obj] = field(default_factory=list)
    push_pods: list[Obj] = field(default_factory=list)
    events: list[Obj] = field(default_factory=list)
    # Kueue's Workload of a suspended Job (QUEUE_ENGINE=kueue): why it waits, or was evicted.
    workload: Obj | None = None
    # A job of several nodes: its JobSet (`job` is then the JobSet's child Job), and the pods
    # of its earlier attempts (a group restart deleted their Job): billed until they end.
    jobset: Obj | None = None
    earlier: list[Obj] = field(default_factory=list)


def observe_job(
    ref: WorkloadRef, objects: JobObjects, *, created_at: datetime | None = None
) -> ObservedWorkload:
    """The observed phase of one job run (see `deploy.types.Phase`); `created_at` is passed
    through (when the run's newest object was made)."""
    base = ObservedWorkload(
        kind=WorkloadKind.JOB,
        id=ref.id,
        phase=Phase.GONE,
        project=ref.project,
        namespace=ref.namespace,
        run=ref.run,
        created_at=created_at,
    )
    job = objects.job
    if job is None:
        if objects.pods or objects.push_jobs:
            return replace(base, phase=Phase.ERROR, reason="the Job object disappeared")
        return replace(base, reason="no object of this run exists")
    pod = newest(objects.pods)
    observed = _with_pod_facts(base, pod)
    outcome = _finished(job, pod, observed)
    if outcome is None:
        return _in_progress(job, pod, observed, objects.events, objects.workload)
    if not _pushes(job) or _never_pulled(job, pod):
        return outcome
    return _after_push(outcome, objects)


def _with_pod_facts(base: ObservedWorkload, pod: Obj | None) -> ObservedWorkload:
    if pod is None:
        return base
    run = container_run(container_status(pod, "main"))
    return replace(
        base,
        run_uid=pod["metadata"].get("uid"),
        node=(pod.get("spec") or {}).get("nodeName"),
        started_at=run.started_at,
        finished_at=run.finished_at,
        exit_code=run.exit_code,
        ends_by=parse_time(pod["metadata"].get("deletionTimestamp")),
    )


def _finished(job: Obj, pod: Obj | None, observed: ObservedWorkload) -> ObservedWorkload | None:
    """The run's outcome once the Job (or its pod) has ended, else None."""
    stopped = _stop_requested(job)
    if is_true(job, "Complete") or is_true(job, "SuccessCriteriaMet"):
        return replace(observed, phase=Phase.SUCCEEDED, reason="exit code 0", exit_code=0)
    if _stopped_queued(job):
        return replace(observed, phase=Phase.STOPPED, reason="stopped before it started")
    failed = condition(job, "Failed") if is_true(job, "Failed") else None
    failed = failed or (condition(job, "FailureTarget") if is_true(job, "FailureTarget") else None)
    pod_phase = ((pod or {}).get("status") or {}).get("phase")
    if failed is None and pod_phase not in ("Succeeded", "Failed"):
        if (job.get("spec") or {}).get("suspend") and stopped:
            return replace(observed, phase=Phase.STOPPED, reason="stopped before it started")
        return None
    if failed is not None and failed.get("reason") == "DeadlineExceeded":
        return _deadline(job, observed, stopped)
    if pod_phase == "Succeeded" and failed is None:
        return replace(observed, phase=Phase.SUCCEEDED, reason="exit code 0", exit_code=0)
    return _failure(pod, observed, failed)


def _deadline(job: Obj, observed: ObservedWorkload, stopped: bool) -> ObservedWorkload:
    if observed.finished_at is None:
        failed = condition(job, "Failed") or {}
        observed = replace(observed, finished_at=parse_time(failed.get("lastTransitionTime")))
    if stopped:
        return replace(observed, phase=Phase.STOPPED, reason="stopped at the user's request")
    limit = (job.get("spec") or {}).get("activeDeadlineSeconds")
    return replace(
        observed, phase=Phase.FAILED, timed_out=True, reason=f"timed out after {limit} s"
    )


def _failure(pod: Obj | None, observed: ObservedWorkload, failed: Obj | None) -> ObservedWorkload:
    pull = container_run(container_status(pod, "pull", init=True)) if pod else ContainerRun("")
    if pull.state == "terminated" and pull.exit_code:
        detail = last_line(pull.message) or f"exit code {pull.exit_code}"
        return replace(observed, phase=Phase.FAILED, reason=clip(f"volume pull failed: {detail}"))
    main = container_run(container_status(pod, "main")) if pod else ContainerRun("")
    if main.state == "terminated" and main.exit_code is not None:
        reason = f"exit code {main.exit_code}"
        if main.reason == "OOMKilled":
            reason += " (out of memory)"
        elif last_line(main.message):
            reason += f": {last_line(main.message)}"
        return replace(observed, phase=Phase.FAILED, reason=clip(reason))
    status = (pod or {}).get("status") or {}
    why = status.get("reason") or (failed or {}).get("reason") or "Failed"
    message = status.get("message") or (failed or {}).get("message") or ""
    return replace(observed, phase=Phase.ERROR, reason=clip(f"pod failed: {why}: {message}"))


def _in_progress(
    job: Obj,
    pod: Obj | None,
    observed: ObservedWorkload,
    events: list[Obj],
    workload: Obj | None = None,
) -> ObservedWorkload:
    if (job.get("spec") or {}).get("suspend"):
        queue = (job["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        reason = waiting_reason_of(workload, queue)
        return replace(
            observed, phase=Phase.QUEUED, reason=clip(reason), evicted_at=evicted_at(workload)
        )
    if pod is None:
        refused = latest_event(events, "FailedCreate")
        reason = clip(f"cannot create the pod: {refused}") if refused else "creating the pod"
        return replace(observed, phase=Phase.PENDING, reason=reason)
    progress = _pod_progress(pod, observed, events)
    if ((pod.get("status") or {}).get("phase")) == "Unknown":
        # The node lost contact: the container may run on and come back. No outcome: the run
        # stays where the pod last was; it ends when the pod is really failed or deleted.
        node = (pod.get("spec") or {}).get("nodeName")
        lost = f"the node {node} is not responding" if node else "the pod's node is not responding"
        return replace(progress, reason=clip(f"{lost} (last reported: {progress.reason})"))
    return progress


def _pod_progress(pod: Obj, observed: ObservedWorkload, events: list[Obj]) -> ObservedWorkload:
    """Where a live pod is, from its conditions and container statuses."""
    unscheduled = unscheduled_reason(pod, events)
    if unscheduled:
        return replace(observed, phase=Phase.PENDING, reason=unscheduled)
    pull = container_run(container_status(pod, "pull", init=True))
    if pull.state == "running":
        return replace(observed, phase=Phase.INITIALIZING, reason="pulling volumes")
    if pull.state == "waiting" or (pull.state == "" and _has_init(pod, "pull")):
        return replace(observed, phase=Phase.PENDING, reason=waiting_reason(pull, what="sync"))
    return _main_progress(pod, observed)


def _main_progress(pod: Obj, observed: ObservedWorkload) -> ObservedWorkload:
    main = container_run(container_status(pod, "main"))
    if main.state == "running":
        return replace(observed, phase=Phase.RUNNING, reason="running")
    if main.state == "terminated":
        return replace(observed, phase=Phase.FINALIZING, reason="the sidecar makes its last push")
    return replace(observed, phase=Phase.PENDING, reason=waiting_reason(main, what="the container"))


def _after_push(outcome: ObservedWorkload, objects: JobObjects) -> ObservedWorkload:
    push = newest(objects.push_jobs)
    if push is None:
        return replace(
            outcome,
            phase=Phase.FINALIZING,
            needs_apply=True,
            reason="the final push of rw volumes is about to start",
        )
    attempt = push_attempt(push)
    final = replace(outcome, push_attempt=attempt)
    if is_true(push, "Complete") or is_true(push, "SuccessCriteriaMet"):
        return replace(final, push_note=_push_note(objects.push_pods, push))
    if is_true(push, "Failed") or is_true(push, "FailureTarget"):
        detail = _push_failure(objects.push_pods, push)
        return replace(final, phase=Phase.SYNC_FAILED, reason=clip(f"final push failed: {detail}"))
    return replace(final, phase=Phase.FINALIZING, reason=f"pushing rw volumes (attempt {attempt})")


def _push_run(pods: list[Obj], push: Obj) -> ContainerRun:
    name = push["metadata"]["name"]
    mine = [p for p in pods if (p["metadata"].get("labels") or {}).get("job-name") == name]
    return container_run(container_status(newest(mine) or {}, "push"))


def _push_note(pods: list[Obj], push: Obj) -> str:
    """The conflicts of a finished push, from the summary it wrote as its termination message
    (`storage.sync --summary-file /dev/termination-log`); "" when there were none."""
    try:
        summary = json.loads(_push_run(pods, push).message or "{}")
    except ValueError:
        return ""
    if not isinstance(summary, dict) or summary.get("event") != "push":
        return ""
    conflicts = [str(key) for key in summary.get("conflicts") or []]
    return conflict_note(conflicts, int(summary.get("conflicts_total") or len(conflicts)))


def _push_failure(pods: list[Obj], push: Obj) -> str:
    run = _push_run(pods, push)
    if run.state == "terminated":
        return last_line(run.message) or f"exit code {run.exit_code}"
    failed = condition(push, "Failed") or {}
    return str(failed.get("message") or failed.get("reason") or "unknown error")


def push_attempt(push_job: Obj) -> int:
    """The attempt number at the end of a push Job's name."""
    suffix = push_job["metadata"]["name"].rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def _stop_requested(job: Obj) -> bool:
    return names.STOP_REQUESTED in (job["metadata"].get("annotations") or {})


def _stopped_queued(job: Obj) -> bool:
    """Stopped while Kueue held it suspended: `stop_job` set parallelism 0 then, so no pod
    has run since, whatever Kueue does with `suspend` later."""
    return _stop_requested(job) and (job.get("spec") or {}).get("parallelism") == 0


def _never_pulled(job: Obj, pod: Obj | None) -> bool:
    """Nothing to push: the Job never started, or its pull failed (a partial workspace must
    not be pushed; the finalize Job also checks, for pods that are gone)."""
    if _stopped_queued(job):
        return True
    if pod is None:
        return not (job.get("status") or {}).get("startTime")
    pull = container_run(container_status(pod, "pull", init=True))
    return pull.state == "terminated" and bool(pull.exit_code)


def _pushes(job: Obj) -> bool:
    """Whether the run has rw volumes: its pod template carries the push sidecar."""
    pod_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return any(c.get("name") == "push" for c in pod_spec.get("initContainers") or [])


def _has_init(pod: Obj, name: str) -> bool:
    return any(c.get("name") == name for c in (pod.get("spec") or {}).get("initContainers") or [])


def observe_notebook(
    ref: WorkloadRef,
    statefulset: Obj | None,
    pods: list[Obj],
    events: list[Obj],
    url: str | None,
) -> ObservedWorkload:
    """A notebook: RUNNING while its editor runs, STOPPED at zero replicas with no pod left."""
    base = ObservedWorkload(
        kind=WorkloadKind.NOTEBOOK,
        id=ref.id,
        phase=Phase.GONE,
        project=ref.project,
        namespace=ref.namespace,
        url=url,
    )
    if statefulset is None:
        return replace(base, reason="no object of this notebook exists")
    pod = newest(pods)
    observed = _with_pod_facts(base, pod)
    if not (statefulset.get("spec") or {}).get("replicas"):
        if pod is None:
            return replace(observed, phase=Phase.STOPPED, reason="stopped; workspace kept")
        return replace(observed, phase=Phase.STOPPING, reason="stopping")
    if pod is None:
        return replace(observed, phase=Phase.PENDING, reason="waiting for the pod to be created")
    if pod["metadata"].get("deletionTimestamp"):
        return replace(observed, phase=Phase.STOPPING, reason="restarting")
    return _notebook_progress(pod, observed, events)


def _notebook_progress(pod: Obj, observed: ObservedWorkload, events: list[Obj]) -> ObservedWorkload:
    unscheduled = unscheduled_reason(pod, events)
    if unscheduled:
        return replace(observed, phase=Phase.PENDING, reason=unscheduled)
    pull = container_run(container_status(pod, "pull", init=True))
    if pull.state == "running":
        return replace(observed, phase=Phase.INITIALIZING, reason="pulling volumes")
    if pull.state == "terminated" and pull.exit_code:
        detail = last_line(pull.message) or f"exit code {pull.exit_code}"
        return replace(observed, phase=Phase.FAILED, reason=clip(f"volume pull failed: {detail}"))
    main = container_run(container_status(pod, "main"))
    if main.state == "running":
        ready = bool((container_status(pod, "main") or {}).get("ready"))
        return replace(observed, phase=Phase.RUNNING, reason="ready" if ready else "starting")
    if main.reason == "CrashLoopBackOff" or main.state == "terminated":
        code = main.exit_code if main.exit_code is not None else _last_exit_code(pod)
        reason = f"the editor exits (exit code {code})"
        return replace(observed, phase=Phase.FAILED, exit_code=code, reason=reason)
    return replace(observed, phase=Phase.PENDING, reason=waiting_reason(main, what="the editor"))


def _last_exit_code(pod: Obj) -> int | None:
    """A crash-looping container reports its previous exit in `lastState`."""
    status = container_status(pod, "main") or {}
    return container_run({"state": status.get("lastState") or {}}).exit_code


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
    base = ObservedWorkload(
        kind=WorkloadKind.APP,
        id=ref.id,
        phase=Phase.GONE,
        project=ref.project,
        namespace=ref.namespace,
    )
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
