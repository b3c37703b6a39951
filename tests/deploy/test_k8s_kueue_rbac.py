"""The `kueue` component (k8s/components/kueue): QUEUE_ENGINE=kueue, and a ClusterRole that
grants exactly what Ajuste does with Kueue's objects (its configuration written, re-applied,
changed and pruned; a queued Job's Workload read; a stopped JobSet's Workload deactivated; the
visibility API's places and the ClusterQueues' usage read),
nothing missing, nothing unused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.kueue import ensure_queues, remove_stale_queues
from deploy.kubernetes.kueue_visibility import cluster_queue_shares, pending_positions
from deploy.types import Phase
from tests.deploy.conftest import make_job_request, project_namespace
from tests.deploy.test_ajuste_on_kubernetes import allowed, config, overlay, used
from tests.deploy.test_kueue_config import H100, gpu_job, queue
from tests.fixtures.k8s_emulator import EmulatedCluster, crds

KUEUE_RESOURCES = {
    "resourceflavors",
    "clusterqueues",
    "workloadpriorityclasses",
    "localqueues",
    "workloads",
    "localqueues/pendingworkloads",
}


def kueue_grants(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    role = next(
        o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "ajuste-kueue"
    )
    binding = next(
        o
        for o in objects
        if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"] == "ajuste-kueue"
    )
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ajuste-controller", "namespace": "ajuste"}
    ]
    for rule in role["rules"]:
        groups = (["kueue.x-k8s.io"], ["visibility.kueue.x-k8s.io"])
        assert rule["apiGroups"] in groups and "*" not in rule["verbs"]
    return {
        ("cluster", r, v)
        for rule in role["rules"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


@pytest.mark.k8s
def test_kueue_component_grants_exactly_what_ajuste_does_with_kueue(
    tmp_path: Path, k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    missing = crds.missing(crds.KUEUE) or crds.missing(crds.JOBSET)
    if missing:
        pytest.skip(missing)
    objects = overlay(tmp_path, components=["kueue"])
    assert config(objects)["QUEUE_ENGINE"] == "kueue"
    grants = kueue_grants(objects)
    kueue = k8s_cluster.install_kueue()
    for slug in ("a", "b"):
        project_namespace(k8s_cluster, slug)
    before = len(k8s_cluster.requests())
    api = k8s_backend.api
    ensure_queues(api, flavors=[H100], queues=[queue("a"), queue("b")])
    moved = replace(H100, node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-NVL"})
    ensure_queues(api, flavors=[moved], queues=[queue("a", 6), queue("b")])  # adopt, patch
    remove_stale_queues(api, keep=["ajuste-a"])
    kueue.automatic = False  # the Job waits: its Workload is what the observation reads
    k8s_cluster.create(gpu_job("a", 0))
    kueue.settle()
    ref = make_job_request(id="a0", project="a", namespace="ajuste-a").ref
    assert k8s_backend.observe_job(ref=ref).phase is Phase.QUEUED
    # A job of two nodes is a JobSet: its stop deactivates its Workload (Kueue would start
    # again what it admitted if only `suspend` were set), which needs `patch` on workloads.
    k8s_cluster.install_jobset()
    gang = make_job_request(
        id="a1", project="a", namespace="ajuste-a", nodes=2, volumes=(), queue_name="ajuste"
    )
    k8s_backend.apply_job(job=gang)
    kueue.settle()
    k8s_backend.stop_job(job=gang)
    workload = kueue.workload("JobSet", "ajuste-a", "job-a1-r1")
    assert workload is not None and workload["spec"]["active"] is False
    # The pages' figures: where waiting work stands, and each project's share of the cohort.
    pending_positions(api, namespace="ajuste-a", local_queue="ajuste")
    assert {s.project for s in cluster_queue_shares(api)} == {"a"}
    needs = {need for need in used_since(k8s_cluster, before) if need[1] in KUEUE_RESOURCES}
    assert {need for need in needs if not allowed(need, grants)} == set()
    assert {g for g in grants if not any(allowed(n, {g}) for n in needs)} == set()


def used_since(cluster: EmulatedCluster, start: int) -> set[tuple[str, str, str]]:
    class Since:
        def requests(self) -> list[Any]:
            return cluster.requests()[start:]

    return used(Since())  # type: ignore[arg-type]
