"""The app kind on a cluster (`ClusterDriver`): a Deployment (its ReplicaSets and pods), kept
across starts, with its Service and any autoscaler."""

from __future__ import annotations

from dataclasses import replace

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.driver import Group, OneNameDriver, newest_creation, read_or_none
from deploy.kubernetes.listing import app_pods, app_state, map_app, owned
from deploy.types import ObservedWorkload, WorkloadRef


class AppDriver(OneNameDriver):
    def observe_group(self, api: KubeApi, ref: WorkloadRef, group: Group) -> ObservedWorkload:
        app = names.app_name(ref)
        found = (d for d in group["deployments"] if d["metadata"].get("name") == app)
        observed = map_app(api, ref, next(found, None), group["replica_sets"], group["pods"])
        created = newest_creation([*group["deployments"], *group["replica_sets"]])
        return replace(observed, created_at=created)

    def main_pods(self, api: KubeApi, ref: WorkloadRef, pods: list[Obj]) -> list[Obj]:
        deployment = read_or_none(api, "Deployment", ref.namespace, names.app_name(ref))
        selector = names.selector(names.selector_labels(ref))
        sets, _ = api.list("ReplicaSet", ref.namespace, label_selector=selector)
        return app_pods(deployment, owned(sets, ref.install), pods)[1]


DRIVER = AppDriver(app_state)
