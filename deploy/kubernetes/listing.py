"""Fetch and group our objects so `observe` can map them: per run, or everything at once.
Only objects `trust` vouches for are grouped: labels alone prove nothing.

Another install's objects (`ajuste.io/install`) are left out wherever an install is given:
per run (`WorkloadRef.install`) and in the sweep's listing. `list_installed` lists exactly one
install's objects by label selector (what an orphan collector may delete); `list_unlabelled`
those made before install ids (adopted by the install that has their row, deleted by none)."""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime

from kubernetes.client.exceptions import ApiException

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.jobsets import child_job, list_jobsets, observe_run, run_jobset
from deploy.kubernetes.kueue_reasons import job_workload
from deploy.kubernetes.observe import JobObjects, observe_app, observe_notebook
from deploy.kubernetes.pods import newest, parse_time, unscheduled_reason
from deploy.kubernetes.trust import ProjectNamespaces, controlled_by, is_main_job, is_push_job
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
        workload=None if main_pods else job_workload(api, jobset or job),
        jobset=jobset,
    )


def _asks_events(jobs: list[Obj], pods: list[Obj]) -> bool:
    """Whether observing these objects may read events (an unscheduled pod, a Job without a
    pod): the objects alone then do not decide the observation. Errs towards True."""
    main = [p for p in pods if component(p) == "main"]
    if main:
        return unscheduled_reason(newest(main) or {}, []) is not None
    return any(not (j.get("spec") or {}).get("suspend") for j in jobs if component(j) == "main")


def notebook_state(api: KubeApi, ref: WorkloadRef) -> ObservedWorkload:
    """One notebook, read afresh."""
    try:
        statefulset: Obj | None = api.read("StatefulSet", ref.namespace, names.notebook_name(ref))
    except ApiException as exc:
        if exc.status != 404:
            raise
        statefulset = None
    if statefulset is not None and not names.belongs(statefulset, ref.install):
        statefulset = None  # another install's notebook of that name: nothing of ours
    selector = names.selector(names.selector_labels(ref))
    pods, _ = api.list("Pod", ref.namespace, label_selector=selector)
    return map_notebook(api, ref, statefulset, owned(pods, ref.install))


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
    try:
        deployment: Obj | None = api.read("Deployment", ref.namespace, names.app_name(ref))
    except ApiException as exc:
        if exc.status != 404:
            raise
        deployment = None
    if deployment is not None and not names.belongs(deployment, ref.install):
        deployment = None  # another install's app of that name: nothing of ours
    selector = names.selector(names.selector_labels(ref))
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


class ObservationCache:
    """Observations of job runs from the last listing, by the uid and resourceVersion of
    every object of the run: a run none of whose objects changed since maps to the same
    observation (`observe_job` is pure), so a steady sweep skips grouping and mapping it.
    Runs that read events are never kept (events change without their pod)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[object, ...], ObservedWorkload] = {}

    def observe(
        self, api: KubeApi, ref: WorkloadRef, group: dict[str, list[Obj]]
    ) -> tuple[tuple[object, ...], ObservedWorkload]:
        key = (ref, *map(_version, [*group["jobsets"], *group["jobs"]]), "|")
        key += tuple(map(_version, group["pods"]))
        found = self.entries.get(key)
        return key, found if found is not None else _observe_group(api, ref, group)

    def keep(self, kept: dict[tuple[object, ...], ObservedWorkload]) -> None:
        self.entries = kept  # only this listing's runs: the cache never outgrows the cluster


_CACHE = ObservationCache()


def observe_everything(
    api: KubeApi,
    namespace: str | None,
    projects: ProjectNamespaces | None = None,
    cache: ObservationCache = _CACHE,
    *,
    install: str = "",
) -> tuple[list[ObservedWorkload], str]:
    """The sweep: six list calls (seven with apps), then one observation per run (events only
    when needed), for runs in Ajuste's project namespaces only (`projects` is refreshed here)
    and, given an `install`, of that install or of none (`unlabelled` observations: made
    before install ids). Also returns the pod list's resourceVersion, where a watch can start.
    The lists select `managed-by` only, not the install: one selector cannot also take the
    unlabelled objects an upgrade finds, so another install's are dropped here, unread."""
    projects = projects or ProjectNamespaces(api)
    projects.refresh()
    with _gc_paused():
        # The listed objects are freed when `_observe_listed` returns, before the collector
        # is back: kept alive past it, they would all be scanned by its next pass instead.
        observations, kept, pods_version = _observe_listed(api, namespace, projects, cache, install)
    cache.keep(kept)
    return observations, pods_version


def observe_namespaces(
    api: KubeApi,
    projects: ProjectNamespaces | None = None,
    cache: ObservationCache = _CACHE,
    *,
    install: str = "",
) -> tuple[list[ObservedWorkload], dict[str, str]]:
    """`observe_everything` one project namespace at a time, for clusters that grant the
    panel no cluster-wide reads of workloads (KUBERNETES_NAMESPACED): the project namespaces
    are listed once (namespaces stay a cluster-wide read), then each is swept with its own
    list calls. Returns the observations and each namespace's pod list resourceVersion: a
    watcher then watches each namespace from its own (`project_namespaces` names them)."""
    projects = projects or ProjectNamespaces(api)
    projects.refresh()
    observations: list[ObservedWorkload] = []
    kept: dict[tuple[object, ...], ObservedWorkload] = {}
    versions: dict[str, str] = {}
    with _gc_paused():
        for namespace in sorted(projects.projects):
            found, keep, version = _observe_listed(api, namespace, projects, cache, install)
            observations += found
            kept.update(keep)
            versions[namespace] = version
    cache.keep(kept)
    return observations, versions


def project_namespaces(api: KubeApi, projects: ProjectNamespaces | None = None) -> list[str]:
    """Ajuste's project namespaces, as `trust` vouches for them (listed now), sorted."""
    projects = projects or ProjectNamespaces(api)
    projects.refresh()
    return sorted(projects.projects)


def _observe_listed(
    api: KubeApi,
    namespace: str | None,
    projects: ProjectNamespaces,
    cache: ObservationCache,
    install: str,
) -> tuple[list[ObservedWorkload], dict[tuple[object, ...], ObservedWorkload], str]:
    jobsets = list_jobsets(api, namespace, MANAGED)
    jobs, _ = api.list("Job", namespace, label_selector=MANAGED)
    pods, pods_version = api.list("Pod", namespace, label_selector=MANAGED)
    sets, _ = api.list("StatefulSet", namespace, label_selector=MANAGED)
    deployments, _ = api.list("Deployment", namespace, label_selector=MANAGED)
    replica_sets: list[Obj] = []
    if deployments:  # a cluster without apps pays no call for them
        replica_sets, _ = api.list("ReplicaSet", namespace, label_selector=MANAGED)
    by_ref: dict[WorkloadRef, dict[str, list[Obj]]] = defaultdict(
        lambda: {
            "jobsets": [],
            "jobs": [],
            "pods": [],
            "sets": [],
            "deployments": [],
            "replica_sets": [],
        }
    )
    listed = (
        ("jobsets", jobsets),
        ("jobs", jobs),
        ("pods", pods),
        ("sets", sets),
        ("deployments", deployments),
        ("replica_sets", replica_sets),
    )
    for key, objects in listed:
        for obj in owned(objects, install):
            ref = ref_of(obj)
            if ref is not None and projects.holds(ref, look_up=False):
                by_ref[ref][key].append(obj)
    observations: list[ObservedWorkload] = []
    kept: dict[tuple[object, ...], ObservedWorkload] = {}
    for ref, group in sorted(by_ref.items(), key=_order):
        if ref.kind is not WorkloadKind.JOB:
            observations.append(_labelled(_observe_group(api, ref, group), group, install))
            continue
        cached, observed = cache.observe(api, ref, group)
        observed = _labelled(observed, group, install)
        if not _asks_events(group["jobs"], group["pods"]):
            kept[cached] = observed
        observations.append(observed)
    return observations, kept, pods_version


def _labelled(
    observed: ObservedWorkload, group: dict[str, list[Obj]], install: str
) -> ObservedWorkload:
    """`unlabelled` when no object of the run carries an install label, for a listing of one
    install (a listing without one, as a backend without an identity makes, owns them all)."""
    unlabelled = bool(install) and not any(
        names.install_of(o) for objects in group.values() for o in objects
    )
    return (
        observed if observed.unlabelled == unlabelled else replace(observed, unlabelled=unlabelled)
    )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cycle collection while tens of thousands of listed objects are decoded and grouped:
    they hold no cycles (plain JSON), yet each batch of allocations would trigger a pass over
    all of them (a third of a 10,000-job sweep). Reference counting still frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _version(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("uid") or "", meta.get("resourceVersion") or "")


def _observe_group(api: KubeApi, ref: WorkloadRef, group: dict[str, list[Obj]]) -> ObservedWorkload:
    if ref.kind is WorkloadKind.NOTEBOOK:
        wanted = names.notebook_name(ref)
        named = (s for s in group["sets"] if s["metadata"].get("name") == wanted)
        observed = map_notebook(api, ref, next(named, None), group["pods"])
        # Without it the orphan collector gave a notebook no grace at all (its workspace
        # claim went at the first sweep that found no row: a restored backup's).
        return replace(observed, created_at=_newest_creation([*group["sets"], *group["pods"]]))
    if ref.kind is WorkloadKind.APP:
        app = names.app_name(ref)
        found = (d for d in group["deployments"] if d["metadata"].get("name") == app)
        observed = map_app(api, ref, next(found, None), group["replica_sets"], group["pods"])
        created = _newest_creation([*group["deployments"], *group["replica_sets"]])
        return replace(observed, created_at=created)
    objects = group_job(api, ref, group["jobs"], group["pods"], group["jobsets"])
    created = _newest_creation([*group["jobsets"], *group["jobs"], *group["pods"]])
    return observe_run(ref, objects, created_at=created)


def _newest_creation(objects: list[Obj]) -> datetime | None:
    """When the newest of a run's objects (trusted or only labelled) was made: the orphan
    collector waits its grace period from there."""
    stamps = [(o.get("metadata") or {}).get("creationTimestamp") or "" for o in objects]
    return parse_time(max(stamps, default=""))


def _order(item: tuple[WorkloadRef, object]) -> tuple[str, str, str, int]:
    ref = item[0]
    return (ref.namespace, ref.kind.value, ref.id, ref.run)
