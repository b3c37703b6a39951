"""The notebook kind on a cluster (`ClusterDriver`): a StatefulSet of one pod, kept across
starts (its Service and token Secret beside it)."""

from __future__ import annotations

from dataclasses import replace

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.driver import Group, OneNameDriver, newest_creation, read_or_none
from deploy.kubernetes.listing import map_notebook, notebook_state
from deploy.kubernetes.trust import controlled_by
from deploy.types import ObservedWorkload, WorkloadRef


class NotebookDriver(OneNameDriver):
    def observe_group(self, api: KubeApi, ref: WorkloadRef, group: Group) -> ObservedWorkload:
        wanted = names.notebook_name(ref)
        named = (s for s in group["sets"] if s["metadata"].get("name") == wanted)
        observed = map_notebook(api, ref, next(named, None), group["pods"])
        # Without it the orphan collector gave a notebook no grace at all (its workspace
        # claim went at the first sweep that found no row: a restored backup's).
        return replace(observed, created_at=newest_creation([*group["sets"], *group["pods"]]))

    def main_pods(self, api: KubeApi, ref: WorkloadRef, pods: list[Obj]) -> list[Obj]:
        owner = read_or_none(api, "StatefulSet", ref.namespace, names.notebook_name(ref))
        if owner is not None and not names.belongs(owner, ref.install):
            owner = None
        return [pod for pod in pods if controlled_by(pod, owner)]


DRIVER = NotebookDriver(notebook_state)
