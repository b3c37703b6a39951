"""The cluster's capacity read from the emulator's nodes and pods: GPUs by product (and MIG
slices by product and profile), in use from bound, unfinished pods' requests (anyone's),
cordoned and NotReady nodes listed and their idle GPUs not counted free; two list calls
whatever the cluster's size."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.capacity import gpu_resources, pod_requests
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
    mig: dict[str, int] | None = None,
) -> Obj:
    """A Node as a kubelet registers it (with GPU feature discovery's product label); `mig`
    the slices per MIG profile the device plugin advertises under the mixed strategy."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    for profile, count in (mig or {}).items():
        allocatable[f"nvidia.com/mig-{profile}"] = str(count)
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


def pod(
    name: str,
    *,
    gpus: int,
    cpu: str = "4",
    init_cpu: str | None = None,
    resource: str = "nvidia.com/gpu",
) -> Obj:
    resources = {"requests": {"cpu": cpu}, "limits": {resource: str(gpus)}}
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


A100 = "NVIDIA-A100-SXM4-80GB"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


def test_mig_slices_are_pools_of_their_own_by_model_and_profile(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    """The GPU operator's mixed strategy: a node advertises its unpartitioned GPUs as
    nvidia.com/gpu and each MIG profile's slices under a resource of its own."""
    for manifest in (
        node("a100-a", gpus=2, product=A100, mig={"1g.10gb": 7, "3g.40gb": 2}),
        node("a100-b", product=A100, mig={"1g.10gb": 14}, cordoned=True),
        node("a100-c", product=A100, mig={"3g.40gb": 0}),  # advertised, none configured
    ):
        k8s_cluster.create(manifest)
    k8s_cluster.create_namespace("other-team")
    for name, count, resource, where in (
        ("small", 3, MIG_1G, "a100-a"),
        ("half", 1, MIG_3G, "a100-a"),
        ("whole", 1, "nvidia.com/gpu", "a100-a"),
        ("left", 2, MIG_1G, "a100-b"),
    ):
        k8s_cluster.create(pod(name, gpus=count, resource=resource))
        k8s_cluster.kubelet.schedule("other-team", name, where)
    capacity = k8s_backend.cluster_capacity()
    assert capacity.pools == (
        GpuPool(A100, total=2, in_use=1, unavailable=0, nodes=1),
        GpuPool(A100, total=21, in_use=5, unavailable=12, nodes=2, resource=MIG_1G),
        GpuPool(A100, total=2, in_use=1, unavailable=0, nodes=1, resource=MIG_3G),
    )
    assert [pool.free for pool in capacity.pools] == [1, 4, 1]
    assert capacity.issues == (
        NodeIssue("a100-b", A100, 0, cordoned=True, ready=True, mig_slices=14),
    )


def test_gpu_resources_are_whole_gpus_and_mig_profiles_only() -> None:
    allocatable = {
        "cpu": "8",
        "nvidia.com/gpu": "1",
        "nvidia.com/mig-2g.20gb": "3",
        "nvidia.com/mig-1g.5gb": "0",
        "nvidia.com/mig-bogus": "4",
        "amd.com/gpu": "2",
    }
    assert gpu_resources(allocatable, "nvidia.com/gpu") == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-2g.20gb": 3,
    }
