"""Kueue and JobSet objects for the emulator's tests (`test_emulator_kueue.py`,
`test_emulator_jobset.py`), as an operator or the panel would write them, in v1beta2."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from tests.fixtures.k8s_emulator import EmulatedCluster, crds
from tests.fixtures.k8s_emulator.kueue import KueueHandle

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io"
V1BETA2 = f"{KUEUE}/v1beta2"
GPU = "nvidia.com/gpu"
QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
A, B = "team-a", "team-b"


def need_schemas(project: str) -> None:
    """Skip, saying why, where the projects' CRD files are absent (the emulator then serves
    their resources with a structural schema only, which cannot refuse what these tests send)."""
    missing = crds.missing(project)
    if missing:
        pytest.skip(missing)


def flavor(name: str = "h100", **labels: str) -> Obj:
    node_labels = labels or {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    return {
        "apiVersion": V1BETA2,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": node_labels},
    }


def cluster_queue(
    name: str,
    gpus: int = 4,
    *,
    cohort: str | None = "gpus",
    flavors: tuple[str, ...] = ("h100",),
    preemption: Obj | None = None,
    limits: Obj | None = None,
    **spec: Any,
) -> Obj:
    resources = [
        {"name": "cpu", "nominalQuota": 64},
        {"name": "memory", "nominalQuota": "256Gi"},
        {"name": GPU, "nominalQuota": gpus, **(limits or {})},
    ]
    body: Obj = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", GPU],
                "flavors": [{"name": f, "resources": resources} for f in flavors],
            }
        ],
        **spec,
    }
    if cohort:
        body["cohortName"] = cohort
    if preemption:
        body["preemption"] = preemption
    return {"apiVersion": V1BETA2, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": body}


def local_queue(namespace: str, cluster_queue_name: str, name: str = "gpu") -> Obj:
    return {
        "apiVersion": V1BETA2,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def priority_class(name: str, value: int) -> Obj:
    return {
        "apiVersion": V1BETA2,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": f"{name} work",
    }


def container(gpus: int = 1) -> Obj:
    return {
        "name": "main",
        "image": "ghcr.io/ajuste/finetune:1",
        "resources": {"limits": {GPU: str(gpus), "cpu": "1", "memory": "1Gi"}},
    }


def queued_job(
    namespace: str,
    name: str,
    *,
    gpus: int = 1,
    queue: str = "gpu",
    priority: str | None = None,
    grace: int = 30,
) -> Obj:
    labels = {QUEUE: queue, **({PRIORITY: priority} if priority else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container(gpus)],
                    "terminationGracePeriodSeconds": grace,
                }
            },
        },
    }


def jobset(
    namespace: str,
    name: str,
    *,
    nodes: int = 2,
    gpus: int = 2,
    queue: str | None = "gpu",
    **spec: Any,
) -> Obj:
    labels = {QUEUE: queue} if queue else {}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": nodes,
                            "completions": nodes,
                            "backoffLimit": 0,
                            "template": {
                                "spec": {"restartPolicy": "Never", "containers": [container(gpus)]}
                            },
                        }
                    },
                }
            ],
            **spec,
        },
    }


def conditions(obj: Obj | None) -> dict[str, tuple[str, str, str]]:
    """Each condition's (status, reason, message), by type."""
    assert obj is not None
    return {
        c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
        for c in (obj.get("status") or {}).get("conditions") or []
    }


def refusal(call: Callable[[], object]) -> tuple[int, Obj]:
    with pytest.raises(ApiException) as raised:
        call()
    return raised.value.status, json.loads(raised.value.body)


def causes(status: Obj) -> dict[str, str]:
    return {c["field"]: c["message"] for c in status["details"]["causes"]}


def create(api: CustomObjectsApi, body: Obj, **options: Any) -> Obj:
    plural = body["kind"].lower() + ("es" if body["kind"].endswith("s") else "s")
    group, version = body["apiVersion"].split("/")
    namespace = body["metadata"].get("namespace")
    if namespace:
        return api.create_namespaced_custom_object(
            group, version, namespace, plural, body, **options
        )
    return api.create_cluster_custom_object(group, version, plural, body, **options)


def two_projects(k8s_cluster: EmulatedCluster) -> EmulatedCluster:
    """Two projects of 4 GPUs in one cohort, each reclaiming what it lent."""
    k8s_cluster.create(flavor())
    k8s_cluster.create(priority_class("preemptible", 100))
    k8s_cluster.create(priority_class("interactive", 10000))
    reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    for team in (A, B):
        k8s_cluster.create_namespace(team)
        k8s_cluster.create(cluster_queue(team, 4, preemption=reclaim))
        k8s_cluster.create(local_queue(team, team))
    return k8s_cluster


def visibility(api: CustomObjectsApi, path: str, **query: str) -> tuple[int, Obj]:
    """GET on Kueue's visibility API (no typed client for it): (status, body)."""
    client = api.api_client
    request = client.param_serialize(
        "GET",
        f"/apis/visibility.kueue.x-k8s.io/{path}",
        query_params=list(query.items()),
        auth_settings=["BearerToken"],
    )
    response = client.call_api(*request)
    response.read()
    return response.status, json.loads(response.data)


def workload(cluster: EmulatedCluster, kueue: KueueHandle, namespace: str, job: str) -> Obj:
    found = kueue.workload("Job", namespace, job)
    assert found is not None, f"no Workload for Job {namespace}/{job}"
    return found


def running(cluster: EmulatedCluster, namespace: str) -> list[str]:
    """Jobs of `namespace` with a live pod."""
    return sorted(
        pod["metadata"]["labels"]["job-name"]
        for pod in cluster.list("pods", namespace)
        if not pod["metadata"].get("deletionTimestamp")
    )


def notebook(name: str) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": A,
            "labels": {QUEUE: "gpu", PRIORITY: "interactive"},
        },
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "jupyter:1", "resources": {"limits": {GPU: "1"}}}
                    ]
                },
            },
        },
    }
