"""Kueue v0.19.2 played on the emulator, through the official client: a queued Job suspended
and given its Workload, admission by quota in cohorts with borrowing and lending limits,
preemption with Kueue's conditions and messages (the victims' pods stopped with their grace
period), requeueing, priorities and queueing strategies, Workloads watched in either version.
Around it: test_emulator_kueue_queues.py; the CRDs themselves: test_emulator_crds.py. The
panel's Kueue engine (issue 20) is tested against this."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client import CustomObjectsApi

from tests.deploy.kueue_objects import (
    GPU,
    KUEUE,
    A,
    B,
    cluster_queue,
    conditions,
    flavor,
    local_queue,
    queued_job,
    running,
    two_projects,
    workload,
)
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.kueue import KueueHandle

pytestmark = pytest.mark.k8s

Obj = dict[str, Any]


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


# -- Kueue's part ------------------------------------------------------------------------------


def test_workloads_are_watched_and_read_in_either_version(
    cohort: EmulatedCluster, kueue: KueueHandle, api: CustomObjectsApi
) -> None:
    listed = api.list_namespaced_custom_object(KUEUE, "v1beta1", A, "workloads")
    cohort.create(queued_job(A, "job-1", priority="interactive"))
    stream = watch.Watch().stream(
        api.list_namespaced_custom_object,
        KUEUE,
        "v1beta1",
        A,
        "workloads",
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=1,
    )
    events = [
        (e["type"], e["object"]["apiVersion"], e["object"]["spec"].get("priorityClassName"))
        for e in stream
    ]
    assert events[0] == ("ADDED", "kueue.x-k8s.io/v1beta1", "interactive")
    assert {e[0] for e in events[1:]} == {"MODIFIED"}  # reserved, then admitted
    name = kueue.workload_name("Job", A, "job-1")
    old = api.get_namespaced_custom_object(KUEUE, "v1beta1", A, "workloads", name)
    assert (old["spec"]["priorityClassSource"], old["spec"]["priorityClassName"]) == (
        "kueue.x-k8s.io/workloadpriorityclass",
        "interactive",
    )
    assert "priorityClassRef" not in old["spec"]


def test_a_queued_job_is_suspended_and_waits_for_its_local_queue(
    k8s_cluster: EmulatedCluster, kueue: KueueHandle
) -> None:
    k8s_cluster.create_namespace(A)
    k8s_cluster.create(queued_job(A, "job-1"))
    job = k8s_cluster.get("jobs", A, "job-1")
    assert job is not None and job["spec"]["suspend"] is True  # Kueue's webhook
    found = workload(k8s_cluster, kueue, A, "job-1")
    assert (
        found["metadata"]["name"].startswith("job-job-1-") and len(found["metadata"]["name"]) == 15
    )
    assert (
        found["metadata"]["ownerReferences"][0] | {"name": "job-1"}
        == found["metadata"]["ownerReferences"][0]
    )
    assert found["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == job["metadata"]["uid"]
    assert found["spec"]["queueName"] == "gpu" and found["spec"]["podSets"][0]["count"] == 1
    assert conditions(found)["QuotaReserved"] == (
        "False",
        "Inadmissible",
        "LocalQueue gpu doesn't exist",
    )
    assert k8s_cluster.list("pods", A) == []


def test_an_admitted_job_runs_on_its_flavor_and_its_workload_finishes_with_it(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    cohort.create(queued_job(A, "job-1", gpus=2))
    found = workload(cohort, kueue, A, "job-1")
    assert conditions(found)["QuotaReserved"] == (
        "True",
        "QuotaReserved",
        "Quota reserved in ClusterQueue team-a",
    )
    assert conditions(found)["Admitted"] == ("True", "Admitted", "The workload is admitted")
    assert found["status"]["admission"] == {
        "clusterQueue": "team-a",
        "podSetAssignments": [
            {
                "name": "main",
                "flavors": {"cpu": "h100", "memory": "h100", GPU: "h100"},
                "resourceUsage": {"cpu": "1", "memory": "1Gi", GPU: "2"},
                "count": 1,
            }
        ],
    }
    job = cohort.get("jobs", A, "job-1")
    assert job is not None and job["spec"]["suspend"] is False
    node_selector = job["spec"]["template"]["spec"]["nodeSelector"]
    assert node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pod = cohort.pod_of(A, "job-1")
    cohort.kubelet.run(A, pod)
    cohort.kubelet.finish(A, pod, exit_code=0)
    done = workload(cohort, kueue, A, "job-1")
    assert conditions(done)["Finished"][:2] == ("True", "Succeeded")
    assert kueue.usage(A) == {("h100", "cpu"): 0, ("h100", "memory"): 0, ("h100", GPU): 0}


def test_a_project_reclaiming_its_quota_evicts_borrowed_preemptible_work(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    """The issue's scenario: B borrows A's idle GPUs; A submits four jobs; the four of B's
    admitted last are preempted (their pods get SIGTERM and their grace period), requeued, and
    wait in B's queue; A's run."""
    for i in range(8):
        cohort.create(queued_job(B, f"b{i}", priority="preemptible"))
        cohort.kubelet.run(B, cohort.pod_of(B, f"b{i}"))
    assert running(cohort, B) == [f"b{i}" for i in range(8)]
    assert cohort.get("clusterqueues", None, B)["status"]["flavorsReservation"][0]["resources"][
        2
    ] == {"name": GPU, "total": "8", "borrowed": "4"}
    cohort.kubelet.ignore_sigterm = True  # the victims take their grace period
    for i in range(4):
        cohort.create(queued_job(A, f"a{i}", priority="preemptible"))
    evicted = [f"b{i}" for i in range(4, 8)]
    preemptors = {workload(cohort, kueue, A, f"a{i}")["metadata"]["uid"] for i in range(4)}
    for name in evicted:
        found = conditions(workload(cohort, kueue, B, name))
        status, reason, message = found["Evicted"]
        assert (status, reason) == ("True", "Preempted")
        assert found["Preempted"] == ("True", "InCohortReclamation", message)
        assert message.startswith("Preempted to accommodate a workload (UID: ")
        assert message.split("(UID: ")[1].split(",")[0] in preemptors
        assert message.endswith(
            "due to reclamation within the cohort; preemptor path: /gpus/team-a; "
            "preemptee path: /gpus/team-b"
        )
        assert found["Requeued"] == ("True", "Preempted", message)
        assert found["QuotaReserved"][:2] == ("False", "Pending")
        assert cohort.get("jobs", B, name)["spec"]["suspend"] is True
    terminating = [p for p in cohort.list("pods", B) if p["metadata"].get("deletionTimestamp")]
    assert sorted(p["metadata"]["labels"]["job-name"] for p in terminating) == evicted
    assert {p["metadata"]["deletionGracePeriodSeconds"] for p in terminating} == {30}
    assert running(cohort, A) == ["a0", "a1", "a2", "a3"]
    cohort.advance(30)  # the grace period ends: the victims are killed and go
    assert running(cohort, B) == ["b0", "b1", "b2", "b3"]
    assert kueue.positions(B) == [(B, kueue.workload_name("Job", B, n)) for n in evicted]
    status = cohort.get("clusterqueues", None, B)["status"]
    assert (status["pendingWorkloads"], status["admittedWorkloads"]) == (4, 4)


def test_a_requeued_job_runs_again_once_quota_frees(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    for i in range(8):
        cohort.create(queued_job(B, f"b{i}", priority="preemptible"))
    cohort.create(queued_job(A, "a0", gpus=4))
    assert running(cohort, A) == ["a0"]
    assert running(cohort, B) == ["b0", "b1", "b2", "b3"]
    pod = cohort.pod_of(A, "a0")
    cohort.kubelet.run(A, pod)
    cohort.kubelet.finish(A, pod, exit_code=0)
    assert running(cohort, B) == [f"b{i}" for i in range(8)]  # borrowed again
    again = workload(cohort, kueue, B, "b7")
    assert conditions(again)["Evicted"][:2] == ("False", "QuotaReserved")
    assert conditions(again)["Evicted"][2].startswith("Previously: Preempted to accommodate")
    made = [p for p in cohort.created("pods", B) if p["metadata"]["labels"]["job-name"] == "b7"]
    assert len(made) == 2  # the first pod, preempted, and the new one


def test_a_higher_priority_job_preempts_a_lower_one_in_its_own_queue(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    cohort.create(queued_job(A, "low", gpus=4, priority="preemptible"))
    cohort.create(queued_job(B, "busy", gpus=4))
    cohort.create(queued_job(A, "notebook", gpus=2, priority="interactive"))
    found = conditions(workload(cohort, kueue, A, "low"))
    assert found["Preempted"][:2] == ("True", "InClusterQueue")
    assert (
        "due to prioritization in the ClusterQueue; preemptor path: /gpus/team-a"
        in found["Preempted"][2]
    )
    assert running(cohort, A) == ["notebook"]
    assert running(cohort, B) == ["busy"]  # B does not borrow: nothing to reclaim there
    assert kueue.positions(A) == [(A, kueue.workload_name("Job", A, "low"))]


def test_equal_priority_never_preempts_and_says_why_it_waits(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    cohort.create(queued_job(A, "first", gpus=4))
    cohort.create(queued_job(B, "other", gpus=4))
    cohort.create(queued_job(A, "second", gpus=1))
    found = conditions(workload(cohort, kueue, A, "second"))
    assert found["QuotaReserved"] == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
        "flavor h100, 1 more needed",
    )
    assert "Admitted" not in found and "Evicted" not in found
    assert running(cohort, A) == ["first"]


def test_borrowing_and_lending_limits_bound_what_moves_between_projects(
    k8s_cluster: EmulatedCluster, kueue: KueueHandle
) -> None:
    k8s_cluster.create(flavor())
    for team, limits in ((A, {"lendingLimit": 3}), (B, {"borrowingLimit": 2})):
        k8s_cluster.create_namespace(team)
        k8s_cluster.create(cluster_queue(team, 4, limits=limits))
        k8s_cluster.create(local_queue(team, team))
    for i in range(8):
        k8s_cluster.create(queued_job(B, f"b{i}"))
    assert running(k8s_cluster, B) == [f"b{i}" for i in range(6)]  # 4 own + at most 2
    found = conditions(workload(k8s_cluster, kueue, B, "b6"))
    assert found["QuotaReserved"][2].endswith(
        "insufficient unused quota for nvidia.com/gpu in flavor h100, 1 more needed"
    )
    for i in range(6):
        k8s_cluster.create(queued_job(A, f"a{i}"))
    assert running(k8s_cluster, A) == ["a0", "a1"]  # A lent 2 of the 3 it may lend
    assert k8s_cluster.get("clusterqueues", None, B)["status"]["flavorsUsage"][0]["resources"][
        2
    ] == {"name": GPU, "total": "6", "borrowed": "2"}


def test_best_effort_fifo_lets_a_small_job_pass_one_that_cannot_fit_and_strict_fifo_does_not(
    k8s_cluster: EmulatedCluster, kueue: KueueHandle
) -> None:
    k8s_cluster.create(flavor())
    for team, strategy in ((A, "BestEffortFIFO"), (B, "StrictFIFO")):
        k8s_cluster.create_namespace(team)
        k8s_cluster.create(cluster_queue(team, 4, cohort=None, queueingStrategy=strategy))
        k8s_cluster.create(local_queue(team, team))
        k8s_cluster.create(queued_job(team, "running", gpus=2))
        k8s_cluster.create(queued_job(team, "big", gpus=4))
        k8s_cluster.create(queued_job(team, "small", gpus=1))
    assert running(k8s_cluster, A) == ["running", "small"]
    assert running(k8s_cluster, B) == ["running"]
    assert kueue.positions(B) == [
        (B, kueue.workload_name("Job", B, "big")),
        (B, kueue.workload_name("Job", B, "small")),
    ]


def test_a_job_no_preemption_can_help_does_not_hold_up_smaller_ones_behind_it(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    cohort.create(queued_job(A, "first", gpus=3))
    cohort.create(queued_job(B, "busy", gpus=4))  # B uses its own: nothing to reclaim
    cohort.create(queued_job(A, "big", gpus=2))  # same priority as first: no victim
    cohort.create(queued_job(A, "small", gpus=1))
    assert running(cohort, A) == ["first", "small"]
    assert conditions(workload(cohort, kueue, A, "big"))["QuotaReserved"][2] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
        "flavor h100, 2 more needed"  # small took the last free one
    )
    assert conditions(workload(cohort, kueue, A, "first")).get("Evicted") is None


def test_a_job_larger_than_its_queue_can_ever_hold_says_so(
    cohort: EmulatedCluster, kueue: KueueHandle
) -> None:
    cohort.create(queued_job(A, "huge", gpus=9))
    found = conditions(workload(cohort, kueue, A, "huge"))
    assert found["QuotaReserved"][2] == (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
        "h100, previously considered podsets requests (0) + current podset request (9) > maximum "
        "capacity (8)"
    )
