"""Kueue's configuration as Ajuste owns it (QUEUE_ENGINE=kueue), as pure builders.

- A `ResourceFlavor` per enabled GPU flavor (its node labels and tolerations), and one
  `ajuste-default` flavor (no labels) for CPU and memory.
- A `ClusterQueue` per project, all in one cohort: the project's GPU quota as the nominal quota
  of every GPU flavor (one resource group per GPU resource key, so a MIG profile is its own
  resource), its CPU and memory quotas on the default flavor, the borrowing and lending limits
  and the fair-sharing weight the site admin set; a project reclaims what it lent by preempting
  any borrower, and within itself lower priorities first.
- A `LocalQueue` named `ajuste` in each project namespace, pointing at the project's queue.
- `WorkloadPriorityClass`es: interactive work (notebooks, apps), batch, and preemptible.

Every workload of a project on Kueue carries the queue-name and priority-class labels
(`queue_labels`). Schemas: Kueue v0.19.2's CRDs, kueue.x-k8s.io/v1beta2.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from deploy import names
from deploy.manifests.common import Manifest, metadata, tolerations
from deploy.types import FlavorSpec

API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
LOCAL_QUEUE = "ajuste"
COHORT = "ajuste"
DEFAULT_FLAVOR = "ajuste-default"
# Work of a higher class preempts lower classes in its own ClusterQueue (`withinClusterQueue`).
PRIORITIES = {
    "interactive": ("ajuste-interactive", 10000, "Notebooks and apps: people wait on them."),
    "batch": ("ajuste-batch", 1000, "Jobs that must not be preempted inside their project."),
    "preemptible": (
        "ajuste-preemptible",
        100,
        "Jobs that may borrow idle GPUs and be preempted; they resume from their checkpoint.",
    ),
}
# "No limit" for CPU and memory (a quota of 0 on the project), as Kueue needs a number.
UNLIMITED_CPU = 1_000_000
UNLIMITED_MEMORY = "1000Ti"


@dataclass(frozen=True)
class QueueRequest:
    """One project's ClusterQueue and LocalQueue. `borrowing_limit`/`lending_limit` are GPUs
    (None: no limit, Kueue's default); `weight` is the fair-sharing weight."""

    slug: str
    namespace: str
    gpu_quota: int
    cpu_quota: int
    memory_gib_quota: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    weight: int = 1
    install: str = ""


def priority_class_name(tier: str) -> str:
    """The WorkloadPriorityClass of `tier` (interactive, batch or preemptible)."""
    return PRIORITIES[tier][0]


def queue_labels(tier: str) -> dict[str, str]:
    """The labels that put a workload in its project's LocalQueue at `tier`'s priority."""
    return {QUEUE_LABEL: LOCAL_QUEUE, PRIORITY_LABEL: priority_class_name(tier)}


def cluster_queue_name(namespace: str) -> str:
    """One per project namespace (cluster-scoped, so named after the unique namespace)."""
    return namespace


def make_resource_flavor(*, flavor: FlavorSpec | None, install: str = "") -> Manifest:
    """The ResourceFlavor of a GPU flavor, or (None) the default flavor for CPU and memory."""
    spec: Manifest = {}
    if flavor is not None and flavor.node_selector:
        spec["nodeLabels"] = dict(flavor.node_selector)
    if flavor is not None and flavor.tolerations:
        spec["tolerations"] = tolerations(flavor.tolerations)
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _meta(flavor.name if flavor else DEFAULT_FLAVOR, install),
        "spec": spec,
    }


def make_priority_classes(*, install: str = "") -> list[Manifest]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": _meta(name, install),
            "value": value,
            "description": description,
        }
        for name, value, description in PRIORITIES.values()
    ]


def make_cluster_queue(*, queue: QueueRequest, flavors: Iterable[FlavorSpec]) -> Manifest:
    """The project's ClusterQueue (see the module docstring); only the project's namespace may
    use it."""
    cpu = queue.cpu_quota or UNLIMITED_CPU
    memory = f"{queue.memory_gib_quota}Gi" if queue.memory_gib_quota else UNLIMITED_MEMORY
    groups: list[Manifest] = [
        {
            "coveredResources": ["cpu", "memory"],
            "flavors": [
                {
                    "name": DEFAULT_FLAVOR,
                    "resources": [
                        {"name": "cpu", "nominalQuota": cpu},
                        {"name": "memory", "nominalQuota": memory},
                    ],
                }
            ],
        }
    ]
    by_key: dict[str, list[str]] = {}
    for flavor in flavors:
        if flavor.gpus_per_unit:
            by_key.setdefault(flavor.resource_key, []).append(flavor.name)
    for key, flavor_names in sorted(by_key.items()):
        groups.append(
            {
                "coveredResources": [key],
                "flavors": [
                    {"name": name, "resources": [_gpu_quota(queue, key)]} for name in flavor_names
                ],
            }
        )
    spec: Manifest = {
        "cohortName": COHORT,
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": queue.namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "fairSharing": {"weight": queue.weight},
        "resourceGroups": groups,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _meta(cluster_queue_name(queue.namespace), queue.install, queue.slug),
        "spec": spec,
    }


def make_local_queue(*, queue: QueueRequest) -> Manifest:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": metadata(
            name=LOCAL_QUEUE,
            namespace=queue.namespace,
            labels=names.project_labels(queue.slug, queue.install),
            annotations={},
        ),
        "spec": {"clusterQueue": cluster_queue_name(queue.namespace)},
    }


def _gpu_quota(queue: QueueRequest, key: str) -> Manifest:
    quota: Manifest = {"name": key, "nominalQuota": queue.gpu_quota}
    if queue.borrowing_limit is not None:
        quota["borrowingLimit"] = queue.borrowing_limit
    if queue.lending_limit is not None:
        quota["lendingLimit"] = min(queue.lending_limit, queue.gpu_quota)
    return quota


def _meta(name: str, install: str, slug: str = "") -> Manifest:
    labels = names.project_labels(slug, install) if slug else _queue_labels(install)
    return metadata(name=name, namespace=None, labels=labels, annotations={})


def _queue_labels(install: str) -> dict[str, str]:
    """Labels of the install-wide Kueue objects (flavors, priority classes)."""
    return {names.MANAGED_BY: names.MANAGER, names.KIND: "queues"} | names.install_labels(install)
