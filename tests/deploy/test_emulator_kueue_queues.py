"""Kueue on the emulator, what surrounds the scheduling (test_emulator_kueue.py): the visibility
API's positions, what a test does by hand (`KueueHandle`: admit, evict, the scheduler off),
deactivation, priority classes, an inactive ClusterQueue, and the pod integration: a
Deployment's gated pods and a notebook's StatefulSet as one pod group, held off quota while
stopped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes.client import CustomObjectsApi

from tests.deploy.kueue_objects import (
    GPU,
    KUEUE,
    PRIORITY,
    QUEUE,
    A,
    B,
    cluster_queue,
    conditions,
    flavor,
    local_queue,
    notebook,
    queued_job,
    running,
    two_projects,
    visibility,
    workload,
)
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.kueue import KueueHandle

pytestmark = pytest.mark.k8s


@pytest.fixture
def kueue(k8s_cluster: EmulatedCluster) -> KueueHandle:
    return k8s_cluster.install_kueue()


@pytest.fixture
def cohort(k8s_cluster: EmulatedCluster, kueue: KueueHandle) -> EmulatedCluster:
    return two_projects(k8s_cluster)


@pytest.fixture
def api(k8s_cluster: EmulatedCluster, kueue: KueueHandle) -> Iterator[CustomObjectsApi]:
    client = k8s_cluster.api_client()
    yield CustomObjectsApi(client)
    client.close()


def test_the_visibility_api_gives_positions_in_both_queues(
    cohort: EmulatedCluster, kueue: KueueHandle, api: CustomObjectsApi
) -> None:
    cohort.create(local_queue(A, A, name="batch"))
    cohort.create(queued_job(B, "busy", gpus=4))
    cohort.create(queued_job(A, "hog", gpus=4, priority="interactive"))  # nothing to preempt
    for name, queue, priority in (
        ("j1", "gpu", None),
        ("j2", "batch", None),
        ("j3", "gpu", "interactive"),
        ("j4", "batch", None),
    ):
        cohort.create(queued_job(A, name, queue=queue, priority=priority))
    code, summary = visibility(api, f"v1beta2/clusterqueues/{A}/pendingworkloads")
    assert code == 200
    assert summary["kind"] == "PendingWorkloadsSummary"
    rows = [
        (
            i["metadata"]["name"],
            i["localQueueName"],
            i["priority"],
            i["positionInClusterQueue"],
            i["positionInLocalQueue"],
        )
        for i in summary["items"]
    ]
    names = {n: kueue.workload_name("Job", A, n) for n in ("j1", "j2", "j3", "j4")}
    assert rows == [
        (names["j3"], "gpu", 10000, 0, 0),
        (names["j1"], "gpu", 0, 1, 1),
        (names["j2"], "batch", 0, 2, 0),
        (names["j4"], "batch", 0, 3, 1),
    ]
    assert summary["items"][0]["metadata"]["ownerReferences"][0]["name"] == "j3"
    code, local = visibility(api, f"v1beta1/namespaces/{A}/localqueues/batch/pendingworkloads")
    assert (code, local["apiVersion"]) == (200, "visibility.kueue.x-k8s.io/v1beta1")
    assert [
        (i["metadata"]["name"], i["positionInLocalQueue"], i["positionInClusterQueue"])
        for i in local["items"]
    ] == [(names["j2"], 0, 2), (names["j4"], 1, 3)]
    _, page = visibility(api, f"v1beta2/clusterqueues/{A}/pendingworkloads", limit="1", offset="2")
    assert [i["metadata"]["name"] for i in page["items"]] == [names["j2"]]
    code, status = visibility(api, "v1beta2/clusterqueues/nobody/pendingworkloads")
    assert (code, status["message"]) == (
        404,
        'clusterqueue.visibility.kueue.x-k8s.io "nobody" not found',
    )


def test_a_test_can_admit_and_evict_by_hand_with_the_scheduler_off(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    kueue.automatic = False
    cohort.create(queued_job(A, "job-1"))
    name = kueue.workload_name("Job", A, "job-1")
    assert cohort.get("jobs", A, "job-1")["spec"]["suspend"] is True
    assert kueue.positions(A) == [(A, name)]
    kueue.admit(A, name)
    assert conditions(cohort.get("workloads", A, name))["Admitted"][0] == "True"
    assert running(cohort, A) == ["job-1"]
    kueue.evict(A, name, message="drained for maintenance")
    found = conditions(cohort.get("workloads", A, name))
    assert found["Evicted"] == ("True", "Preempted", "drained for maintenance")
    assert found["Requeued"] == ("True", "Preempted", "drained for maintenance")
    assert found["QuotaReserved"] == ("False", "Pending", "drained for maintenance")
    assert cohort.get("jobs", A, "job-1")["spec"]["suspend"] is True
    assert running(cohort, A) == [] and kueue.positions(A) == [(A, name)]


def test_a_deactivated_workload_is_evicted_and_not_requeued(
    cohort: EmulatedCluster, kueue: KueueHandle, api: CustomObjectsApi
) -> None:
    cohort.create(queued_job(A, "job-1"))
    name = kueue.workload_name("Job", A, "job-1")
    api.patch_namespaced_custom_object(
        KUEUE, "v1beta2", A, "workloads", name, {"spec": {"active": False}}
    )
    cohort.reconcile()
    found = conditions(cohort.get("workloads", A, name))
    assert found["Evicted"] == ("True", "Deactivated", "The workload is deactivated")
    assert found["Requeued"][0] == "False"
    assert running(cohort, A) == [] and kueue.positions(A) == []


def test_a_missing_priority_class_makes_no_workload_and_says_so(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    cohort.create(queued_job(A, "job-1", priority="urgent"))
    assert kueue.workload("Job", A, "job-1") is None
    events = [e for e in cohort.list("events", A) if e["reason"] == "ErrWorkloadCompose"]
    assert [(e["type"], e["message"]) for e in events] == [
        ("Warning", 'workloadpriorityclasses.kueue.x-k8s.io "urgent" not found')
    ]  # one event, its count going up with each attempt
    assert cohort.get("jobs", A, "job-1")["spec"]["suspend"] is True


def test_the_priority_comes_from_the_workload_priority_class(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    cohort.create(queued_job(A, "job-1", priority="interactive"))
    spec = workload(cohort, kueue, A, "job-1")["spec"]
    assert (spec["priority"], spec["priorityClassRef"]) == (
        10000,
        {"group": KUEUE, "kind": "WorkloadPriorityClass", "name": "interactive"},
    )


def test_a_cluster_queue_with_a_missing_flavor_is_inactive_and_its_work_waits(
    k8s_cluster: EmulatedCluster, kueue: KueueHandle
) -> None:
    k8s_cluster.create_namespace(A)
    k8s_cluster.create(cluster_queue(A, flavors=("a100",)))
    k8s_cluster.create(local_queue(A, A))
    k8s_cluster.create(queued_job(A, "job-1"))
    active = conditions(k8s_cluster.get("clusterqueues", None, A))["Active"]
    assert active == (
        "False",
        "FlavorNotFound",
        "Can't admit new workloads: references missing ResourceFlavor(s): a100.",
    )
    assert conditions(k8s_cluster.get("localqueues", A, "gpu"))["Active"] == (
        "False",
        "ClusterQueueIsInactive",
        "Can't submit new workloads to clusterQueue",
    )
    assert conditions(workload(k8s_cluster, kueue, A, "job-1"))["QuotaReserved"] == (
        "False",
        "Inadmissible",
        "ClusterQueue team-a is inactive",
    )
    k8s_cluster.create(flavor("a100"))
    assert running(k8s_cluster, A) == ["job-1"]


def test_a_deployments_pods_are_gated_until_admitted_each_as_its_own_workload(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    kueue.automatic = False
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "app-7",
            "namespace": A,
            "labels": {QUEUE: "gpu", PRIORITY: "interactive"},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "app-7"}},
            "template": {
                "metadata": {"labels": {"app": "app-7"}},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "vllm:1", "resources": {"limits": {GPU: "1"}}}
                    ]
                },
            },
        },
    }
    cohort.create(deployment)
    [pod] = cohort.pods_of_deployment(A, "app-7")
    name = pod["metadata"]["name"]
    assert pod["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    assert conditions(pod)["PodScheduled"][:2] == ("False", "SchedulingGated")
    with pytest.raises(AssertionError, match="gated by"):
        cohort.kubelet.schedule(A, name)
    found = kueue.workload("Pod", A, name)
    assert found is not None and found["spec"]["priority"] == 10000
    kueue.automatic = True
    cohort.reconcile()
    pod = cohort.get("pods", A, name)
    assert "schedulingGates" not in pod["spec"]
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    cohort.kubelet.run(A, name)  # now the scheduler may place it
    assert kueue.usage(A)[("h100", GPU)] == 1


def test_a_stopped_notebook_holds_no_quota_and_queues_again_when_started(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    cohort.create(notebook("nb-3"))
    assert kueue.usage(A)[("h100", GPU)] == 1
    cohort.store.patch("statefulsets", A, "nb-3", {"spec": {"replicas": 0}})  # the panel's stop
    cohort.reconcile()
    found = kueue.workload("StatefulSet", A, "nb-3")
    assert conditions(found)["QuotaReserved"] == (
        "False",
        "OnHold",
        "StatefulSet scaled to zero; workload on hold",
    )
    assert kueue.usage(A)[("h100", GPU)] == 0 and kueue.positions(A) == []
    cohort.store.patch("statefulsets", A, "nb-3", {"spec": {"replicas": 1}})
    cohort.reconcile()
    assert conditions(kueue.workload("StatefulSet", A, "nb-3"))["Admitted"][0] == "True"
    assert "schedulingGates" not in cohort.get("pods", A, "nb-3-0")["spec"]


def test_a_notebooks_statefulset_is_one_pod_group_counted_against_its_queue(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    cohort.create(queued_job(A, "batch", gpus=4))
    cohort.create(queued_job(B, "busy", gpus=4))
    cohort.create(notebook("nb-3"))
    found = kueue.workload("StatefulSet", A, "nb-3")
    assert found is not None and found["metadata"]["name"].startswith("statefulset-nb-3-")
    pod = cohort.get("pods", A, "nb-3-0")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == found["metadata"]["name"]
    assert conditions(found)["QuotaReserved"][:2] == ("True", "QuotaReserved")  # preempted batch
    assert "schedulingGates" not in pod["spec"]
    assert conditions(workload(cohort, kueue, A, "batch"))["Preempted"][:2] == (
        "True",
        "InClusterQueue",
    )
    assert kueue.usage(A)[("h100", GPU)] == 1
