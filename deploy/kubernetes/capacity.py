"""What the cluster has to run on: GPUs by model from the nodes' allocatable `nvidia.com/gpu`
(the model from GPU feature discovery's `nvidia.com/gpu.product` label), and MIG slices by
model and profile where the GPU operator advertises them (`nvidia.com/mig-1g.10gb`, the
"mixed" strategy; under the "single" one they are `nvidia.com/gpu` already), in use from the
requests of the pods bound to them and not finished (anyone's, not only Ajuste's: a GPU
another tenant holds is not free), and the nodes that take no new work (cordoned or not
Ready). Two list calls (nodes, pods), whatever the cluster's size."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

from deploy.gpu_resources import mig_profile
from deploy.kubernetes.api import KubeApi, Obj
from deploy.types import GPU_RESOURCE_KEY, ClusterCapacity, GpuPool, NodeIssue

# Pods that hold their node's resources: bound and not finished.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
UNKNOWN_MODEL = "unknown"
# GPU feature discovery's label (as deploy.local.gpus reads product names too).
PRODUCT_LABEL = "nvidia.com/gpu.product"


def read_capacity(
    api: KubeApi, *, resource_key: str = GPU_RESOURCE_KEY, namespaces: list[str] | None = None
) -> ClusterCapacity:
    """One reading of the cluster (raises `TransientError` when the API does not answer).
    `namespaces` reads pods in those only (the namespaced mode, where pods cannot be listed
    cluster-wide): GPUs other tenants hold then count as free."""
    nodes, _ = api.list("Node")
    if namespaces is None:
        pods, _ = api.list("Pod", field_selector=LIVE_PODS)
    else:
        pods = [p for ns in namespaces for p in api.list("Pod", ns, field_selector=LIVE_PODS)[0]]
    requested: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            for key, value in pod_requests(pod).items():
                requested[node][key] += value
    return _summary(nodes, requested, resource_key)


def _summary(
    nodes: list[Obj], requested: dict[str, dict[str, Decimal]], resource_key: str
) -> ClusterCapacity:
    # (model, resource) -> [total, in use, unavailable, nodes]
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    issues, millicpu, millicpu_used, memory = [], 0, 0, 0
    for node in nodes:
        name = node["metadata"]["name"]
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        gpus = gpu_resources(allocatable, resource_key)
        used = requested.get(name, {})
        millicpu += int(_quantity(allocatable.get("cpu")) * 1000)
        millicpu_used += int(used.get("cpu", Decimal(0)) * 1000)
        memory += int(_quantity(allocatable.get("memory")) / 2**20)
        slices = sum(count for resource, count in gpus.items() if resource != resource_key)
        issue = node_issue(node, gpus.get(resource_key, 0), slices)
        if issue is not None:
            issues.append(issue)
        model = _labels(node).get(PRODUCT_LABEL) or UNKNOWN_MODEL
        for resource, count in gpus.items():
            in_use = min(count, int(used.get(resource, Decimal(0))))
            pool = totals[(model, resource)]
            pool[0] += count
            pool[1] += in_use
            pool[2] += count - in_use if issue is not None else 0
            pool[3] += 1
    pools = tuple(
        GpuPool(model, total, in_use, unavailable, count, resource)
        for (model, resource), (total, in_use, unavailable, count) in sorted(totals.items())
    )
    return ClusterCapacity(
        backend="kubernetes",
        pools=pools,
        millicpu=millicpu,
        millicpu_in_use=millicpu_used,
        memory_mib=memory,
        nodes=len(nodes),
        issues=tuple(sorted(issues, key=lambda i: i.name)),
    )


def gpu_resources(allocatable: Obj, resource_key: str) -> dict[str, int]:
    """The node's whole GPUs and, under MIG's "mixed" strategy, each profile's slices
    (`nvidia.com/mig-1g.10gb`); resources it has none of are left out."""
    found = {}
    for resource, value in allocatable.items():
        if resource == resource_key or mig_profile(resource):
            count = int(_quantity(value))
            if count > 0:
                found[resource] = count
    return found


def node_issue(node: Obj, gpus: int, mig_slices: int = 0) -> NodeIssue | None:
    """Why this node takes no new work, or None when it does."""
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    conditions = (node.get("status") or {}).get("conditions") or []
    ready_condition = next((c for c in conditions if c.get("type") == "Ready"), None)
    ready = ready_condition is not None and ready_condition.get("status") == "True"
    if ready and not cordoned:
        return None
    reason = ""
    if not ready:
        found = ready_condition or {}
        reason = found.get("message") or found.get("reason") or "no Ready condition reported"
    has_gpus = gpus or mig_slices
    model = _labels(node).get(PRODUCT_LABEL) or (UNKNOWN_MODEL if has_gpus else "")
    return NodeIssue(node["metadata"]["name"], model, gpus, cordoned, ready, reason, mig_slices)


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """What the scheduler reserves for a pod: its containers' and sidecars' requests summed,
    or an ordinary init container's when larger (they run one at a time, before the rest).
    A request left out defaults to the limit, as the API server does."""
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or []
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    running = _sum(_container_requests(c) for c in [*(spec.get("containers") or []), *sidecars])
    for init in inits:
        if init.get("restartPolicy") != "Always":
            for key, value in _container_requests(init).items():
                running[key] = max(running.get(key, Decimal(0)), value)
    return running


def _container_requests(container: Obj) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {key: _quantity(value) for key, value in merged.items()}


def _sum(parts: Iterable[dict[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = defaultdict(Decimal)
    for part in parts:
        for key, value in part.items():
            total[key] += value
    return dict(total)


def _quantity(value: object) -> Decimal:
    if value in (None, ""):
        return Decimal(0)
    try:
        return Decimal(parse_quantity(value))
    except ValueError:
        return Decimal(0)


def _labels(node: Obj) -> dict[str, str]:
    return dict(node["metadata"].get("labels") or {})
