"""The cluster's capacity read from the emulator's nodes and pods: GPUs by product, in use from
bound, unfinished pods' requests (anyone's), cordoned and NotReady nodes listed and their idle
GPUs not counted free; two list calls whatever the cluster's size."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.capacity import pod_requests
from deploy.types import ClusterCapacity, GpuPool, NodeIssue
from tests.fixtures.k8s_emulator import EmulatedCluster

H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"
Obj = dict[str, Any]

pytestmark = pytest.mark.k8s


def node(
    name: str,
    *,
    gpus: int = 0,
    product: str | None = None,
    ready: bool = True,
    cordoned: bool = False,
    cpu: str = "32",
    memory: str = "128Gi",
) -> Obj:
    """A Node as a kubelet registers it (with GPU feature discovery's product label)."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    ready_condition = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    if not ready:
        ready_condition = {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
        }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": product} if product else {},
        },
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [ready_condition],
        },
    }


def pod(name: str, *, gpus: int, cpu: str = "4", init_cpu: str | None = None) -> Obj:
    resources = {"requests": {"cpu": cpu}, "limits": {"nvidia.com/gpu": str(gpus)}}
    spec: Obj = {"containers": [{"name": "main", "image": "busybox", "resources": resources}]}
    if init_cpu:
        init = {"name": "pull", "image": "busybox", "resources": {"requests": {"cpu": init_cpu}}}
        spec["initContainers"] = [init]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "other-team"},
        "spec": spec,
    }


@pytest.fixture
def cluster(k8s_cluster: EmulatedCluster) -> EmulatedCluster:
    for manifest in (
        node("h100-a", gpus=8, product=H100),
        node("h100-b", gpus=8, product=H100, cordoned=True),
        node("l4-a", gpus=4, product=L4, ready=False),
        node("cpu-a", cpu="15500m", memory="64Gi"),
        node("mystery", gpus=2),
    ):
        k8s_cluster.create(manifest)
    k8s_cluster.create_namespace("other-team")
    for name, gpus, where in (
        ("train-1", 4, "h100-a"),
        ("train-2", 2, "h100-a"),
        ("old", 1, "h100-b"),
        ("done", 2, "h100-a"),
        ("pending", 8, None),
    ):
        k8s_cluster.create(pod(name, gpus=gpus))
        if where:
            k8s_cluster.kubelet.schedule("other-team", name, where)
    k8s_cluster.kubelet.run("other-team", "train-1")
    k8s_cluster.kubelet.run("other-team", "done")
    k8s_cluster.kubelet.finish("other-team", "done", exit_code=0)
    return k8s_cluster


def test_gpus_by_product_in_use_from_bound_live_pods_and_nodes_taking_no_work(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    cluster.emulator._requests.clear()
    capacity = k8s_backend.cluster_capacity()
    assert capacity == ClusterCapacity(
        backend="kubernetes",
        pools=(
            # h100-a: 4 running + 2 bound (pending on the node) of 8; h100-b cordoned: 1 held,
            # its 7 others unavailable; the finished pod and the unbound one hold nothing.
            GpuPool(H100, total=16, in_use=7, unavailable=7, nodes=2),
            GpuPool(L4, total=4, in_use=0, unavailable=4, nodes=1),
            GpuPool("unknown", total=2, in_use=0, unavailable=0, nodes=1),
        ),
        millicpu=4 * 32000 + 15500,
        millicpu_in_use=3 * 4000,
        memory_mib=4 * 128 * 1024 + 64 * 1024,
        nodes=5,
        issues=(
            NodeIssue("h100-b", H100, 8, cordoned=True, ready=True),
            NodeIssue(
                "l4-a",
                L4,
                4,
                cordoned=False,
                ready=False,
                reason="Kubelet stopped posting node status.",
            ),
        ),
    )
    assert [pool.free for pool in capacity.pools] == [2, 0, 2]
    assert len(cluster.requests()) == 2


def test_an_empty_cluster_has_no_gpus(k8s_backend: KubernetesBackend) -> None:
    assert k8s_backend.cluster_capacity() == ClusterCapacity(backend="kubernetes")


def test_pod_requests_count_init_containers_as_the_scheduler_does() -> None:
    plain = pod("a", gpus=1, cpu="2", init_cpu="500m")
    assert pod_requests(plain) == {"cpu": 2, "nvidia.com/gpu": 1}
    bigger_init = pod("b", gpus=1, cpu="1", init_cpu="3")
    assert pod_requests(bigger_init) == {"cpu": 3, "nvidia.com/gpu": 1}
    sidecar = pod("c", gpus=1, cpu="1", init_cpu="250m")
    sidecar["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    assert pod_requests(sidecar) == {"cpu": 1.25, "nvidia.com/gpu": 1}
