"""The sweep: every run of Ajuste's project namespaces observed from one set of list calls
(`observe_everything`), or one project namespace at a time (`observe_namespaces`), with an
`ObservationCache` that skips runs none of whose objects changed. The per-run reads it groups
with are `listing`'s."""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.driver import driver
from deploy.kubernetes.jobsets import list_jobsets
from deploy.kubernetes.listing import MANAGED, component, owned, ref_of
from deploy.kubernetes.pods import newest, unscheduled_reason
from deploy.kubernetes.trust import ProjectNamespaces
from deploy.types import ObservedWorkload, WorkloadRef


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
        return key, found if found is not None else driver(ref.kind).observe_group(api, ref, group)

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


def _list_managed(api: KubeApi, namespace: str | None) -> tuple[dict[str, list[Obj]], str]:
    """Every object we manage, by group key, and the pod list's resourceVersion."""
    # Pods first: the watch follows pods from this list's version, so whatever changes after
    # it (a run made while the other lists are read: its Job listed, its pod not) reaches the
    # watch as an event. Listed after the Jobs, such a run's pod showed without its Job (GONE)
    # and the watch, starting after the pod's last change, said nothing more until a relist.
    pods, pods_version = api.list("Pod", namespace, label_selector=MANAGED)
    jobsets = list_jobsets(api, namespace, MANAGED)
    jobs, _ = api.list("Job", namespace, label_selector=MANAGED)
    sets, _ = api.list("StatefulSet", namespace, label_selector=MANAGED)
    deployments, _ = api.list("Deployment", namespace, label_selector=MANAGED)
    replica_sets: list[Obj] = []
    if deployments:  # a cluster without apps pays no call for them
        replica_sets, _ = api.list("ReplicaSet", namespace, label_selector=MANAGED)
    listed = {
        "jobsets": jobsets,
        "jobs": jobs,
        "pods": pods,
        "sets": sets,
        "deployments": deployments,
        "replica_sets": replica_sets,
    }
    return listed, pods_version


def _observe_listed(
    api: KubeApi,
    namespace: str | None,
    projects: ProjectNamespaces,
    cache: ObservationCache,
    install: str,
) -> tuple[list[ObservedWorkload], dict[tuple[object, ...], ObservedWorkload], str]:
    listed, pods_version = _list_managed(api, namespace)
    by_ref: dict[WorkloadRef, dict[str, list[Obj]]] = defaultdict(
        lambda: {key: [] for key in listed}
    )
    for key, objects in listed.items():
        for obj in owned(objects, install):
            ref = ref_of(obj)
            if ref is not None and projects.holds(ref, look_up=False):
                by_ref[ref][key].append(obj)
    observations: list[ObservedWorkload] = []
    kept: dict[tuple[object, ...], ObservedWorkload] = {}
    for ref, group in sorted(by_ref.items(), key=_order):
        if not driver(ref.kind).cacheable:
            observed = driver(ref.kind).observe_group(api, ref, group)
            observations.append(_labelled(observed, group, install))
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


def _order(item: tuple[WorkloadRef, object]) -> tuple[str, str, str, int]:
    ref = item[0]
    return (ref.namespace, ref.kind.value, ref.id, ref.run)


def _asks_events(jobs: list[Obj], pods: list[Obj]) -> bool:
    """Whether observing these objects may read events (an unscheduled pod, a Job without a
    pod): the objects alone then do not decide the observation. Errs towards True."""
    main = [p for p in pods if component(p) == "main"]
    if main:
        return unscheduled_reason(newest(main) or {}, []) is not None
    return any(not (j.get("spec") or {}).get("suspend") for j in jobs if component(j) == "main")
