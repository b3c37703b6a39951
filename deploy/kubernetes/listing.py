"""Fetch and group our objects so `observe` can map them, one run at a time (`sweep` does
everything at once with the same grouping). Only objects `trust` vouches for are grouped:
labels alone prove nothing.

Another install's objects (`ajuste.io/install`) are left out wherever an install is given:
per run (`WorkloadRef.install`) and in the sweep's listing. `list_installed` lists exactly one
install's objects by label selector (what an orphan collector may delete); `list_unlabelled`
those made before install ids (adopted by the install that has their row, deleted by none)."""

from __future__ import annotations

from collections.abc import Sequence

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.driver import read_or_none
from deploy.kubernetes.jobsets import child_job, earlier_pods, list_jobsets, run_jobset
from deploy.kubernetes.kueue_reasons import job_workload
from deploy.kubernetes.observe import JobObjects, observe_notebook
from deploy.kubernetes.observe_app import observe_app
from deploy.kubernetes.pods import newest, unscheduled_reason
from deploy.kubernetes.trust import controlled_by, is_main_job, is_push_job
from deploy.types import ObservedWorkload, WorkloadKind, WorkloadRef

MANAGED = names.selector({names.MANAGED_BY: names.MANAGER})


def install_selector(install: str) -> str:
    """The label selector of one install's objects."""
    return names.selector({names.MANAGED_BY: names.MANAGER, names.INSTALL: install})


def list_installed(api: KubeApi, kind: str, namespace: str | None, *, install: str) -> list[Obj]:
    """This install's objects of `kind` (all namespaces with None), by label selector: an
    object of another install, or of none, is never among them."""
    if not install:
        raise ValueError("list_installed needs an install id")
    items, _ = api.list(kind, namespace, label_selector=install_selector(install))
    return items


def list_unlabelled(api: KubeApi, kind: str, namespace: str | None) -> list[Obj]:
    """Ajuste's objects of `kind` that carry no install label (made before install ids)."""
    selector = f"{MANAGED},!{names.INSTALL}"
    items, _ = api.list(kind, namespace, label_selector=selector)
    return items


def owned(objects: list[Obj], install: str) -> list[Obj]:
    """The objects `install` may treat as its own (`names.belongs`)."""
    return objects if not install else [o for o in objects if names.belongs(o, install)]


def ref_of(obj: Obj) -> WorkloadRef | None:
    """The workload run an object belongs to, from its labels and annotations."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    try:
        kind = WorkloadKind(labels.get(names.KIND, ""))
    except ValueError:
        return None
    run = labels.get(names.RUN, "1")
    return WorkloadRef(
        kind=kind,
        project=annotations.get(names.PROJECT) or labels.get(names.PROJECT, ""),
        namespace=meta.get("namespace", ""),
        id=annotations.get(names.ID) or labels.get(names.ID, ""),
        run=int(run) if run.isdigit() else 1,
    )


def component(obj: Obj) -> str:
    """`main`, `push`, `workspace` or `notebook`."""
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(names.COMPONENT, ""))


def pod_events(api: KubeApi, pod: Obj | None) -> list[Obj]:
    """Events of a pod that has no node yet (the scheduler explains itself there)."""
    if pod is None or unscheduled_reason(pod, []) is None:
        return []
    return _events(api, "Pod", pod)


def job_events(api: KubeApi, job: Obj | None) -> list[Obj]:
    """Events of a running Job without a pod: the Job controller says why (quota...)."""
    if job is None or (job.get("spec") or {}).get("suspend"):
        return []
    return _events(api, "Job", job)


def _events(api: KubeApi, kind: str, obj: Obj) -> list[Obj]:
    meta = obj["metadata"]
    fields = f"involvedObject.kind={kind},involvedObject.name={meta['name']}"
    items, _ = api.list("Event", meta["namespace"], field_selector=fields)
    return items


def job_objects(api: KubeApi, ref: WorkloadRef) -> JobObjects:
    """The JobSet, Jobs and pods of one job run."""
    selector = names.selector(names.selector_labels(ref))
    jobsets = owned(list_jobsets(api, ref.namespace, selector), ref.install)
    jobs, _ = api.list("Job", ref.namespace, label_selector=selector)
    pods, _ = api.list("Pod", ref.namespace, label_selector=selector)
    return group_job(api, ref, owned(jobs, ref.install), owned(pods, ref.install), jobsets)


def group_job(
    api: KubeApi, ref: WorkloadRef, jobs: list[Obj], pods: list[Obj], jobsets: Sequence[Obj] = ()
) -> JobObjects:
    """Split one run's objects by component and fetch events for an unscheduled pod. The Jobs
    are the run's by name (a JobSet's child Job when the run has a JobSet), the pods count
    only when one of those Jobs controls them."""
    jobset = run_jobset(ref, list(jobsets))
    if jobset is not None:
        job = child_job(ref, jobset, jobs)
    else:
        job = next((j for j in jobs if component(j) == "main" and is_main_job(ref, j)), None)
    push_jobs = [j for j in jobs if component(j) == "push" and is_push_job(ref, j)]
    main_pods = [p for p in pods if component(p) == "main" and controlled_by(p, job)]
    push_pods = [
        p for p in pods if component(p) == "push" and any(controlled_by(p, j) for j in push_jobs)
    ]
    return JobObjects(
        job=job,
        pods=main_pods,
        push_jobs=push_jobs,
        push_pods=push_pods,
        events=pod_events(api, newest(main_pods)) if main_pods else job_events(api, job),
        # Only a suspended Job has one to read (job_workload): its pods are gone or going
        # (an evicted pod terminating while it saves its checkpoint).
        workload=None if _live(main_pods) else job_workload(api, jobset or job),
        jobset=jobset,
        earlier=earlier_pods(ref, jobset, job, pods) if jobset is not None else [],
    )


def _live(pods: list[Obj]) -> bool:
    return any(not p["metadata"].get("deletionTimestamp") for p in pods)


def notebook_state(api: KubeApi, ref: WorkloadRef) -> ObservedWorkload:
    """One notebook, read afresh."""
    statefulset = _read_owned(api, "StatefulSet", ref, names.notebook_name(ref))
    pods, _ = api.list("Pod", ref.namespace, label_selector=_selector(ref))
    return map_notebook(api, ref, statefulset, owned(pods, ref.install))


def _read_owned(api: KubeApi, kind: str, ref: WorkloadRef, name: str) -> Obj | None:
    """The one-name object of `kind`, or None when absent (404) or another install's object
    of that name (nothing of ours)."""
    found = read_or_none(api, kind, ref.namespace, name)
    return found if found is not None and names.belongs(found, ref.install) else None


def _selector(ref: WorkloadRef) -> str:
    return names.selector(names.selector_labels(ref))


def map_notebook(
    api: KubeApi, ref: WorkloadRef, statefulset: Obj | None, pods: list[Obj]
) -> ObservedWorkload:
    """`observe_notebook` with the URL from the StatefulSet and events when unscheduled; only
    the StatefulSet of this name and the pods it controls count."""
    if statefulset is not None and statefulset["metadata"].get("name") != names.notebook_name(ref):
        statefulset = None
    pods = [p for p in pods if controlled_by(p, statefulset)]
    annotations = ((statefulset or {}).get("metadata") or {}).get("annotations") or {}
    events = pod_events(api, newest(pods))
    return observe_notebook(ref, statefulset, pods, events, annotations.get(names.URL))


def app_state(api: KubeApi, ref: WorkloadRef) -> ObservedWorkload:
    """One app, read afresh: its Deployment, ReplicaSets and pods."""
    deployment = _read_owned(api, "Deployment", ref, names.app_name(ref))
    selector = _selector(ref)
    sets, _ = api.list("ReplicaSet", ref.namespace, label_selector=selector)
    pods, _ = api.list("Pod", ref.namespace, label_selector=selector)
    return map_app(api, ref, deployment, owned(sets, ref.install), owned(pods, ref.install))


def app_pods(
    deployment: Obj | None, sets: list[Obj], pods: list[Obj]
) -> tuple[list[Obj], list[Obj]]:
    """The ReplicaSets the Deployment controls and the pods they control (`trust`)."""
    mine = [rs for rs in sets if controlled_by(rs, deployment)]
    return mine, [p for p in pods if any(controlled_by(p, rs) for rs in mine)]


def map_app(
    api: KubeApi, ref: WorkloadRef, deployment: Obj | None, sets: list[Obj], pods: list[Obj]
) -> ObservedWorkload:
    """`observe_app` over the app's own objects: the Deployment of this name, the
    ReplicaSets it controls and their pods; events when the newest pod is unscheduled."""
    if deployment is not None and deployment["metadata"].get("name") != names.app_name(ref):
        deployment = None
    sets, pods = app_pods(deployment, sets, pods)
    return observe_app(ref, deployment, sets, pods, pod_events(api, newest(pods)))
