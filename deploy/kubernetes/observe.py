"""Map our objects (as dicts) to `ObservedWorkload`s. Pure: the backend lists, this decides.
A job's and a notebook's here; an app's (and a pod's `ReplicaRun`) in `observe_app`.

A job run is its Job (`component=main`), the Job's pods, and the finalize push Jobs with their
pods. The user's container is `main`; `pull` and `push` are the sync containers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

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
from deploy.types import ObservedWorkload, Phase, WorkloadKind, WorkloadRef
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


def gone(kind: WorkloadKind, ref: WorkloadRef, **facts: Any) -> ObservedWorkload:
    """Where each kind's observation starts: the run's names, GONE, and the `facts` its kind
    knows before reading its objects (run, url, replica runs...)."""
    return ObservedWorkload(
        kind=kind,
        id=ref.id,
        phase=Phase.GONE,
        project=ref.project,
        namespace=ref.namespace,
        **facts,
    )


def observe_job(
    ref: WorkloadRef, objects: JobObjects, *, created_at: datetime | None = None
) -> ObservedWorkload:
    """The observed phase of one job run (see `deploy.types.Phase`); `created_at` is passed
    through (when the run's newest object was made)."""
    base = gone(WorkloadKind.JOB, ref, run=ref.run, created_at=created_at)
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
    pull, early = _pull_progress(pod, observed, events)
    if early is not None:
        return early
    if pull.state == "waiting" or (pull.state == "" and _has_init(pod, "pull")):
        return replace(observed, phase=Phase.PENDING, reason=waiting_reason(pull, what="sync"))
    return _main_progress(pod, observed)


def _pull_progress(
    pod: Obj, observed: ObservedWorkload, events: list[Obj]
) -> tuple[ContainerRun, ObservedWorkload | None]:
    """A live pod's volume-pull container, and where the pod is when it is not yet past it:
    unscheduled (PENDING, the scheduler's reason) or pulling (INITIALIZING)."""
    pull = container_run(container_status(pod, "pull", init=True))
    unscheduled = unscheduled_reason(pod, events)
    if unscheduled:
        return pull, replace(observed, phase=Phase.PENDING, reason=unscheduled)
    if pull.state == "running":
        return pull, replace(observed, phase=Phase.INITIALIZING, reason="pulling volumes")
    return pull, None


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
    base = gone(WorkloadKind.NOTEBOOK, ref, url=url)
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
    pull, early = _pull_progress(pod, observed, events)
    if early is not None:
        return early
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
