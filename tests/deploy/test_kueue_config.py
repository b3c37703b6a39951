"""Kueue's configuration as Ajuste writes it (deploy/manifests/kueue.py and
deploy/kubernetes/kueue.py): literal dicts, then applied to the emulator, which validates each
object against Kueue v0.19.2's CRDs and plays Kueue's scheduler on the Jobs the panel makes:
borrowing in the cohort, reclaiming by preemption, priorities."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.kueue import ensure_queues, remove_stale_queues
from deploy.kubernetes.kueue_reasons import waiting_reason_of
from deploy.manifests import kueue as mk
from deploy.manifests import make_job, make_notebook_statefulset
from deploy.manifests.apps import make_app_deployment
from deploy.types import FlavorSpec, JobRequest, NotebookRequest, Phase, Toleration
from tests.deploy.conftest import make_job_request, project_namespace
from tests.deploy.kueue_objects import conditions, need_schemas
from tests.deploy.test_app_manifests import make_app_request
from tests.fixtures.k8s_emulator import EmulatedCluster, crds
from tests.fixtures.k8s_emulator.kueue import KueueHandle

Obj = dict[str, Any]
H100 = FlavorSpec(
    name="h100",
    gpu_model="H100",
    gpus_per_unit=1,
    vcpu_per_unit=1,
    memory_gib_per_unit=1,
    node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    tolerations=(Toleration(key="nvidia.com/gpu"),),
)
CPU = replace(H100, name="cpu", gpu_model="", gpus_per_unit=0, node_selector={}, tolerations=())
MIG = replace(H100, name="h100-1g", resource_key="nvidia.com/mig-1g.10gb")
OURS = {"app.kubernetes.io/managed-by": "ajuste"}


def queue(slug: str, gpus: int = 4, **changes: Any) -> mk.QueueRequest:
    return replace(mk.QueueRequest(slug, f"ajuste-{slug}", gpus, 64, 256), **changes)


def test_cluster_queue_literal() -> None:
    made = mk.make_cluster_queue(
        queue=queue("a", borrowing_limit=4, lending_limit=9, weight=3), flavors=[H100, CPU, MIG]
    )
    gpu = {"nominalQuota": 4, "borrowingLimit": 4, "lendingLimit": 4}
    assert made == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {
            "name": "ajuste-a",
            "labels": {**OURS, "ajuste.io/project": "a", "ajuste.io/kind": "project"},
        },
        "spec": {
            "cohortName": "ajuste",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ajuste-a"}},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "fairSharing": {"weight": 3},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "ajuste-default",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 64},
                                {"name": "memory", "nominalQuota": "256Gi"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", **gpu}]}],
                },
                {
                    "coveredResources": ["nvidia.com/mig-1g.10gb"],
                    "flavors": [
                        {
                            "name": "h100-1g",
                            "resources": [{"name": "nvidia.com/mig-1g.10gb", **gpu}],
                        }
                    ],
                },
            ],
        },
    }


def test_unlimited_quotas_and_limits_left_out() -> None:
    made = mk.make_cluster_queue(queue=queue("a", cpu_quota=0, memory_gib_quota=0), flavors=[H100])
    default, gpus = made["spec"]["resourceGroups"]
    assert default["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": mk.UNLIMITED_CPU},
        {"name": "memory", "nominalQuota": mk.UNLIMITED_MEMORY},
    ]
    assert gpus["flavors"][0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": 4}]


def test_flavors_local_queue_and_priorities_literal() -> None:
    assert mk.make_resource_flavor(flavor=H100, install="i1") == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {
            "name": "h100",
            "labels": {**OURS, "ajuste.io/kind": "queues", "ajuste.io/install": "i1"},
        },
        "spec": {
            "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }
    assert mk.make_resource_flavor(flavor=None)["spec"] == {}
    assert mk.make_local_queue(queue=queue("a"))["spec"] == {"clusterQueue": "ajuste-a"}
    assert mk.make_local_queue(queue=queue("a"))["metadata"]["namespace"] == "ajuste-a"
    values = {p["metadata"]["name"]: p["value"] for p in mk.make_priority_classes()}
    assert values == {"ajuste-interactive": 10000, "ajuste-batch": 1000, "ajuste-preemptible": 100}
    assert mk.queue_labels("preemptible") == {
        "kueue.x-k8s.io/queue-name": "ajuste",
        "kueue.x-k8s.io/priority-class": "ajuste-preemptible",
    }


def test_preemptible_job_ignores_disruptions_and_carries_its_priority() -> None:
    job = make_job(
        job=make_job_request(
            queue_name="ajuste", priority_class="ajuste-preemptible", preemptible=True
        )
    )
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "ajuste-preemptible"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["podFailurePolicy"] == {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]
    }
    plain = make_job(job=make_job_request(queue_name="ajuste", priority_class="ajuste-batch"))
    assert "podFailurePolicy" not in plain["spec"]


# -- on the emulator ---------------------------------------------------------------------------


@pytest.fixture
def kueue(k8s_cluster: EmulatedCluster) -> KueueHandle:
    need_schemas(crds.KUEUE)
    return k8s_cluster.install_kueue()


def configured(cluster: EmulatedCluster, backend: KubernetesBackend, **limits: Any) -> None:
    for slug in ("a", "b"):
        if cluster.get("namespaces", None, f"ajuste-{slug}") is None:
            project_namespace(cluster, slug)
    ensure_queues(backend.api, flavors=[H100, CPU], queues=[queue("a"), queue("b", **limits)])


def gpu_job(slug: str, i: int, tier: str = "preemptible") -> Obj:
    request: JobRequest = make_job_request(
        id=f"{slug}{i}",
        project=slug,
        namespace=f"ajuste-{slug}",
        flavor=H100,
        units=1,
        volumes=(),
        queue_name=mk.LOCAL_QUEUE,
        priority_class=mk.priority_class_name(tier),
        preemptible=tier == "preemptible",
    )
    return make_job(job=request)


def live(cluster: EmulatedCluster, namespace: str) -> list[str]:
    return sorted(
        p["metadata"]["labels"]["job-name"]
        for p in cluster.list("pods", namespace)
        if not p["metadata"].get("deletionTimestamp")
    )


@pytest.mark.k8s
def test_configuration_is_accepted_and_applied_twice_unchanged(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, kueue: KueueHandle
) -> None:
    configured(k8s_cluster, k8s_backend)
    stored = k8s_cluster.get("clusterqueues", None, "ajuste-a")
    assert stored is not None
    assert conditions(stored)["Active"][0] == "True"
    writes = len(k8s_cluster.requests())
    configured(k8s_cluster, k8s_backend)
    methods = {str(r.method.value) for r in k8s_cluster.requests()[writes:]}
    assert "PATCH" not in methods  # the spec hash matched: adopted as is


@pytest.mark.k8s
def test_a_changed_quota_is_patched_and_a_gone_project_loses_its_queue(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, kueue: KueueHandle
) -> None:
    configured(k8s_cluster, k8s_backend)
    ensure_queues(k8s_backend.api, flavors=[H100], queues=[queue("a", 6)])
    stored = k8s_cluster.get("clusterqueues", None, "ajuste-a")
    assert stored is not None
    assert stored["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["nominalQuota"] == 6
    assert remove_stale_queues(k8s_backend.api, keep=["ajuste-a"]) == ["ajuste-b"]
    assert k8s_cluster.get("clusterqueues", None, "ajuste-b") is None


@pytest.mark.k8s
def test_borrowed_gpus_are_reclaimed_by_preempting_the_borrower(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, kueue: KueueHandle
) -> None:
    configured(k8s_cluster, k8s_backend)
    for i in range(8):
        k8s_cluster.create(gpu_job("b", i))
    kueue.settle()
    assert len(live(k8s_cluster, "ajuste-b")) == 8  # 4 of its own, 4 borrowed from a
    for i in range(4):
        k8s_cluster.create(gpu_job("a", i, tier="batch"))
    kueue.settle()
    assert len(live(k8s_cluster, "ajuste-a")) == 4
    assert len(live(k8s_cluster, "ajuste-b")) == 4
    evicted = [w for w in k8s_cluster.list("workloads", "ajuste-b") if conditions(w).get("Evicted")]
    assert len(evicted) == 4
    assert {conditions(w)["Preempted"][1] for w in evicted} == {"InCohortReclamation"}


@pytest.mark.k8s
def test_a_borrowing_limit_of_zero_keeps_a_project_to_its_own_quota(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, kueue: KueueHandle
) -> None:
    configured(k8s_cluster, k8s_backend, borrowing_limit=0)
    for i in range(6):
        k8s_cluster.create(gpu_job("b", i))
    kueue.settle()
    assert len(live(k8s_cluster, "ajuste-b")) == 4
    assert len(kueue.positions("ajuste-b")) == 2


# -- why a suspended Job waits -----------------------------------------------------------------


def workload_with(*conds: tuple[str, str, str, str]) -> Obj:
    return {
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conds
            ]
        }
    }


def test_a_preempted_workload_says_who_reclaimed_and_that_it_resumes() -> None:
    message = "Preempted to accommodate a workload (UID: u1) due to reclamation within the cohort"
    workload = workload_with(
        ("QuotaReserved", "False", "Pending", "couldn't assign flavors"),
        ("Evicted", "True", "Preempted", message),
        ("Preempted", "True", "InCohortReclamation", message),
    )
    assert waiting_reason_of(workload, "ajuste") == (
        f"preempted: {message}; back in Kueue queue ajuste, it resumes from its last checkpoint"
    )
    drained = workload_with(("Evicted", "True", "PodsReadyTimeout", "pods not ready in 5m"))
    assert waiting_reason_of(drained, "ajuste").startswith("evicted: pods not ready in 5m;")


def test_a_waiting_workload_says_what_quota_it_lacks() -> None:
    lacking = (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu"
    )
    workload = workload_with(("QuotaReserved", "False", "Pending", lacking))
    assert waiting_reason_of(workload, "ajuste") == f"waiting in Kueue queue ajuste: {lacking}"
    assert waiting_reason_of(None, "ajuste") == "waiting for admission by Kueue queue ajuste"
    assert (
        waiting_reason_of(workload_with(), None) == "waiting for admission by the cluster's queue"
    )


@pytest.mark.k8s
def test_an_evicted_job_is_observed_queued_with_kueues_message(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, kueue: KueueHandle
) -> None:
    configured(k8s_cluster, k8s_backend)
    k8s_cluster.create(gpu_job("b", 0))
    kueue.settle()
    name = kueue.workload_name("Job", "ajuste-b", "job-b0-r1")
    kueue.automatic = False  # evicted, it stays out (its quota would admit it again at once)
    kueue.evict("ajuste-b", name, message="Preempted to make room for ajuste-a's work")
    ref = make_job_request(id="b0", project="b", namespace="ajuste-b").ref
    observed = k8s_backend.observe_job(ref=ref)
    assert observed.phase is Phase.QUEUED
    assert observed.reason.startswith("preempted: Preempted to make room for ajuste-a's work;")


# -- notebooks ---------------------------------------------------------------------------------


def notebook_in(slug: str, request: NotebookRequest, **changes: Any) -> NotebookRequest:
    return replace(
        request,
        project=slug,
        namespace=f"ajuste-{slug}",
        flavor=H100,
        units=1,
        queue_name=mk.LOCAL_QUEUE,
        priority_class=mk.priority_class_name("interactive"),
        **changes,
    )


def test_a_notebook_statefulset_carries_its_queue_and_priority(
    notebook_request: NotebookRequest,
) -> None:
    made = make_notebook_statefulset(notebook=notebook_in("a", notebook_request))
    labels = made["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "ajuste"
    assert labels["kueue.x-k8s.io/priority-class"] == "ajuste-interactive"
    plain = make_notebook_statefulset(notebook=notebook_request)
    assert not {k for k in plain["metadata"]["labels"] if k.startswith("kueue.x-k8s.io/")}


@pytest.mark.k8s
def test_a_notebook_counts_against_its_projects_cluster_queue(
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    kueue: KueueHandle,
    notebook_request: NotebookRequest,
) -> None:
    configured(k8s_cluster, k8s_backend)
    k8s_backend.apply_notebook(notebook=notebook_in("a", notebook_request))
    kueue.settle()
    assert kueue.usage("ajuste-a")[("h100", "nvidia.com/gpu")] == 1
    for i in range(4):  # the notebook's GPU is one of a's four: three jobs run, one waits
        k8s_cluster.create(gpu_job("a", i, tier="batch"))
    kueue.settle()
    assert len(kueue.positions("ajuste-a")) == 0  # it borrows b's idle GPU instead
    assert kueue.usage("ajuste-a")[("h100", "nvidia.com/gpu")] == 5


# -- apps ------------------------------------------------------------------------------------


def app_in(slug: str, **changes: Any) -> Any:
    return make_app_request(
        project=slug,
        namespace=f"ajuste-{slug}",
        flavor=H100,
        units=1,
        queue_name=mk.LOCAL_QUEUE,
        priority_class=mk.priority_class_name("interactive"),
        **changes,
    )


def test_an_app_deployment_and_its_pods_carry_the_queue_and_priority() -> None:
    made = make_app_deployment(app=app_in("a"))
    for labels in (made["metadata"]["labels"], made["spec"]["template"]["metadata"]["labels"]):
        assert labels["kueue.x-k8s.io/queue-name"] == "ajuste"
        assert labels["kueue.x-k8s.io/priority-class"] == "ajuste-interactive"
    assert not {k for k in made["spec"]["selector"]["matchLabels"] if k.startswith("kueue")}
    plain = make_app_deployment(app=make_app_request())
    assert not {k for k in plain["metadata"]["labels"] if k.startswith("kueue.x-k8s.io/")}


@pytest.mark.k8s
def test_an_app_counts_against_its_projects_cluster_queue(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, kueue: KueueHandle
) -> None:
    configured(k8s_cluster, k8s_backend, borrowing_limit=0)
    k8s_backend.apply_app(app=app_in("b"))
    k8s_cluster.reconcile()
    kueue.settle()
    assert kueue.usage("ajuste-b")[("h100", "nvidia.com/gpu")] == 1
    for i in range(4):  # the app's GPU is one of b's four: three jobs run, one waits
        k8s_cluster.create(gpu_job("b", i, tier="batch"))
    kueue.settle()
    assert kueue.usage("ajuste-b")[("h100", "nvidia.com/gpu")] == 4
    assert len(kueue.positions("ajuste-b")) == 1
