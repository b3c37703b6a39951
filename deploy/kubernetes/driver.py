"""How the cluster backend reads and observes each kind: its `ClusterDriver`, found through the
kind registry (`deploy.kinds`: each kind's spec names its driver's module, which holds
`DRIVER`). The backend, the sweep and the log reader ask the driver and never name a kind."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Protocol

from kubernetes.client.exceptions import ApiException

from deploy import kinds
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.pods import parse_time
from deploy.types import ObservedWorkload, WorkloadKind, WorkloadRef

# One run's objects as the sweep grouped them, by list ("jobsets", "jobs", "pods", "sets",
# "deployments", "replica_sets").
Group = dict[str, list[Obj]]


class ClusterDriver(Protocol):
    # The sweep may reuse an observation of a run none of whose objects changed.
    cacheable: bool

    def state(self, api: KubeApi, ref: WorkloadRef) -> ObservedWorkload:
        """One run, read afresh."""
        ...

    def observe_group(self, api: KubeApi, ref: WorkloadRef, group: Group) -> ObservedWorkload:
        """One run from the sweep's lists, with `created_at` (its newest object's)."""
        ...

    def after_event(
        self, api: KubeApi, ref: WorkloadRef, deleted_pod: Obj | None
    ) -> ObservedWorkload:
        """One run after a watch event; `deleted_pod`: a pod of it that just went away."""
        ...

    def main_pods(self, api: KubeApi, ref: WorkloadRef, pods: list[Obj]) -> list[Obj]:
        """Of `pods` (labelled as the run's user process), those its own controller controls:
        a pod that only carries the labels must not feed the run's log."""
        ...


class OneNameDriver:
    """A `ClusterDriver` base for a kind whose objects keep one name across its starts (a
    notebook's, an app's): a run is read whole by `read`, after a watch event too (a deleted
    pod tells nothing the controller's status does not), and never cached by the sweep."""

    cacheable = False

    def __init__(self, read: Callable[[KubeApi, WorkloadRef], ObservedWorkload]) -> None:
        self.read = read

    def state(self, api: KubeApi, ref: WorkloadRef) -> ObservedWorkload:
        return self.read(api, ref)

    def after_event(
        self, api: KubeApi, ref: WorkloadRef, deleted_pod: Obj | None
    ) -> ObservedWorkload:
        return self.read(api, ref)


@cache
def driver(kind: WorkloadKind) -> ClusterDriver:
    """The cluster driver of `kind`, from the module its spec names."""
    found: ClusterDriver = importlib.import_module(kinds.spec(kind).cluster).DRIVER
    return found


def read_or_none(api: KubeApi, kind: str, namespace: str, name: str) -> Obj | None:
    """The object, or None where it does not exist (404)."""
    try:
        return api.read(kind, namespace, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def newest_creation(objects: list[Obj]) -> datetime | None:
    """When the newest of a run's objects (trusted or only labelled) was made: the orphan
    collector waits its grace period from there."""
    stamps = [(o.get("metadata") or {}).get("creationTimestamp") or "" for o in objects]
    return parse_time(max(stamps, default=""))
