"""Kueue on the cluster (QUEUE_ENGINE=kueue): apply the configuration Ajuste owns
(deploy/manifests/kueue.py) and remove the ClusterQueues of projects that are gone."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from deploy import names
from deploy.kubernetes.api import KubeApi
from deploy.kubernetes.apply import apply, delete_found
from deploy.manifests import kueue as manifests
from deploy.types import FlavorSpec


def ensure_queues(
    api: KubeApi,
    *,
    flavors: Sequence[FlavorSpec],
    queues: Iterable[manifests.QueueRequest],
    install: str = "",
) -> list[str]:
    """Make Kueue's objects match the panel's flavors and projects; the ClusterQueues applied.
    Flavors and priority classes first: a ClusterQueue naming a missing flavor stays inactive.
    Each project's namespace must exist (the LocalQueue lives there)."""
    for flavor in [None, *(f for f in flavors if f.gpus_per_unit)]:
        apply(api, manifests.make_resource_flavor(flavor=flavor, install=install))
    for priority in manifests.make_priority_classes(install=install):
        apply(api, priority)
    applied = []
    for queue in queues:
        apply(api, manifests.make_cluster_queue(queue=queue, flavors=flavors))
        apply(api, manifests.make_local_queue(queue=queue))
        applied.append(manifests.cluster_queue_name(queue.namespace))
    return applied


def remove_stale_queues(api: KubeApi, *, keep: Iterable[str], install: str = "") -> list[str]:
    """Delete this install's project ClusterQueues not in `keep` (projects deleted); their
    names. Kueue then stops admitting from them; what runs there was stopped with the project."""
    wanted = set(keep)
    selector = names.selector({names.MANAGED_BY: names.MANAGER, names.KIND: "project"})
    items, _ = api.list("ClusterQueue", None, label_selector=selector)
    removed = []
    for item in items:
        name = item["metadata"]["name"]
        stale = name not in wanted and names.belongs(item, install)
        if stale and delete_found(api, item, "ClusterQueue"):
            removed.append(name)
    return removed
