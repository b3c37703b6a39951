"""The deploy side's kind registry (DESIGN.md rule 16, as `controlpanel/kinds.py` is the panel's):
each workload kind is named once here, by the module that declares its `DeploySpec` (what the
shared code of both backends needs of it: object names, the pod that runs the user's process,
what it owns on a cluster, how it ends locally), and its cluster driver (`ClusterDriver`, in
`deploy.kubernetes`: how it is read and observed) by module name, so the local backend never
imports the Kubernetes client. Shared code looks a kind up here and never names one.

A new kind is its manifests module (with `SPEC`), its cluster driver module (with `DRIVER`) and
one line in `KIND_MODULES` (plus its `WorkloadKind` value and request type in `deploy.types`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from deploy.types import WorkloadKind, WorkloadRef

# Each kind's module, by its `WorkloadKind` value: the module holds `SPEC`, a `DeploySpec`.
KIND_MODULES: dict[str, str] = {
    "job": "deploy.manifests.jobs",
    "notebook": "deploy.manifests.notebooks",
    "app": "deploy.manifests.apps",
}


@dataclass(frozen=True)
class DeploySpec:
    """What the shared deploy code needs of one kind."""

    kind: WorkloadKind
    # The name its objects (and its local run directory) share, from the run's ref.
    object_name: Callable[[WorkloadRef], str]
    # The `ajuste.io/component` of the pod that runs the user's process (its log, its end).
    component: str
    # The cluster objects that run it (and hold GPUs), controllers first so that nothing makes
    # a new pod meanwhile: what an orphan's stop deletes (its workspace claim aside).
    running: tuple[str, ...]
    # The module of its `ClusterDriver` (deploy.kubernetes), imported only by that backend.
    cluster: str
    # Each run has objects of its own (the `ajuste.io/run` label); else one set of objects is
    # kept across runs (a notebook's, an app's).
    numbered_runs: bool = False
    # A long-running server (locally: its exit is a failure, never a success), and its word
    # in the reason ("editor", "server"); "" for a run that ends by itself.
    server: str = ""
    # Locally, an orphan keeps its directory (workspace, outputs, log) until `delete_orphan`;
    # False: nothing of it is worth keeping (an app's server), it goes at once.
    keeps_workspace: bool = True
    # Local: each start of its server is one replica run, billed as a cluster's pods are.
    replica_per_start: bool = False


@cache
def spec(kind: WorkloadKind | str) -> DeploySpec:
    """The spec of `kind` (a `WorkloadKind` or its value); KeyError for an unregistered one."""
    found = importlib.import_module(KIND_MODULES[str(kind)]).SPEC
    if not isinstance(found, DeploySpec) or found.kind != kind:
        raise TypeError(f"{KIND_MODULES[str(kind)]}.SPEC is not the DeploySpec of {kind}")
    return found


def specs() -> list[DeploySpec]:
    """Every registered kind's spec, in registry order."""
    return [spec(kind) for kind in KIND_MODULES]
