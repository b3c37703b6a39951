"""Kueue v0.19.2 on the emulator, through the official client's CustomObjectsApi: its custom
resources served and refused as a real API server with Kueue's CRDs refuses them, and Kueue's
part played as Kueue plays it (Workloads for queued Jobs, pods and StatefulSets, admission by
quota in cohorts with borrowing, preemption with Kueue's conditions and messages, the
visibility API). The panel's Kueue engine (issue 20) is tested against this."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from tests.deploy.kueue_objects import (
    GPU,
    KUEUE,
    PRIORITY,
    QUEUE,
    cluster_queue,
    conditions,
    flavor,
    local_queue,
    need_schemas,
    priority_class,
    queued_job,
)
from tests.fixtures.k8s_emulator import EmulatedCluster, crds
from tests.fixtures.k8s_emulator.kueue import KueueHandle

pytestmark = pytest.mark.k8s

Obj = dict[str, Any]
A, B = "team-a", "team-b"


@pytest.fixture
def kueue(k8s_cluster: EmulatedCluster) -> KueueHandle:
    return k8s_cluster.install_kueue()


@pytest.fixture
def api(k8s_cluster: EmulatedCluster, kueue: KueueHandle) -> Iterator[CustomObjectsApi]:
    client = k8s_cluster.api_client()
    yield CustomObjectsApi(client)
    client.close()


@pytest.fixture
def schemas() -> None:
    need_schemas(crds.KUEUE)


@pytest.fixture
def cohort(k8s_cluster: EmulatedCluster, kueue: KueueHandle) -> EmulatedCluster:
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


# -- the CRDs, served and refused -------------------------------------------------------------


def test_a_cluster_queue_is_defaulted_and_read_back_in_both_versions(
    api: CustomObjectsApi, schemas: None
) -> None:
    created = create(api, cluster_queue("team-a"))
    assert created["spec"]["queueingStrategy"] == "BestEffortFIFO"  # the CRD's defaults
    assert created["spec"]["preemption"] == {
        "borrowWithinCohort": {"policy": "Never"},
        "reclaimWithinCohort": "Never",
        "withinClusterQueue": "Never",
    }
    assert created["metadata"]["generation"] == 1 and created["metadata"]["uid"]
    old = api.get_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", "team-a")
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert old["spec"]["cohort"] == "gpus" and "cohortName" not in old["spec"]


def test_an_object_written_in_v1beta1_is_stored_as_v1beta2(
    api: CustomObjectsApi, k8s_cluster: EmulatedCluster, schemas: None
) -> None:
    body = cluster_queue("team-b")
    body["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    body["spec"]["cohort"] = body["spec"].pop("cohortName")
    body["spec"]["admissionChecks"] = ["provisioning"]
    create(api, body)
    stored = k8s_cluster.get("clusterqueues", None, "team-b")
    assert stored is not None and stored["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert stored["spec"]["cohortName"] == "gpus"
    assert stored["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "provisioning"}]
    }


def test_schema_violations_are_422_with_one_cause_per_field_and_nothing_is_stored(
    api: CustomObjectsApi, k8s_cluster: EmulatedCluster, schemas: None
) -> None:
    body = cluster_queue("team-a", queueingStrategy="Random")
    body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "four"
    code, status = refusal(lambda: create(api, body))
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["details"]["group"] == KUEUE and status["details"]["kind"] == "ClusterQueue"
    found = causes(status)
    assert found["spec.queueingStrategy"] == (
        'Unsupported value: "Random": supported values: "StrictFIFO", "BestEffortFIFO"'
    )
    quota = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert found[quota].startswith(f'Invalid value: "four": {quota} in body should match')
    assert status["message"].startswith('ClusterQueue.kueue.x-k8s.io "team-a" is invalid: [')
    assert k8s_cluster.get("clusterqueues", None, "team-a") is None


def test_a_type_a_required_field_and_a_length_are_checked(
    api: CustomObjectsApi, k8s_cluster: EmulatedCluster, schemas: None
) -> None:
    k8s_cluster.create_namespace(A)
    body = local_queue(A, "x" * 300)
    code, status = refusal(lambda: create(api, body))
    assert code == 422
    assert causes(status)["spec.clusterQueue"] == "Too long: may not be more than 253 bytes"
    body = {**local_queue(A, "team-a"), "spec": {"clusterQueue": 7}}
    code, status = refusal(lambda: create(api, body))
    assert causes(status)["spec.clusterQueue"] == (
        'Invalid value: "integer": spec.clusterQueue in body must be of type string: "integer"'
    )
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": A},
        "spec": {"queueName": "gpu", "podSets": [{"name": "main", "count": -1}]},
    }
    code, status = refusal(lambda: create(api, workload))
    assert causes(status) == {
        "spec.podSets[0].template": "Required value",
        "spec.podSets[0].count": (
            "Invalid value: -1: spec.podSets[0].count in body should be greater than or equal to 0"
        ),
    }
    assert k8s_cluster.list("localqueues") == [] and k8s_cluster.list("workloads") == []


def test_an_unknown_field_is_refused_unless_the_request_asks_for_pruning(
    api: CustomObjectsApi, k8s_cluster: EmulatedCluster, schemas: None
) -> None:
    body = cluster_queue("team-a", fairShare={"weight": 2})
    code, status = refusal(lambda: create(api, body))
    assert (code, status["message"]) == (
        400,
        'strict decoding error: unknown field "spec.fairShare"',
    )
    assert k8s_cluster.get("clusterqueues", None, "team-a") is None
    pruned = create(api, body, field_validation="Ignore")
    assert "fairShare" not in pruned["spec"]


def test_rules_of_the_crd_are_evaluated(
    api: CustomObjectsApi, k8s_cluster: EmulatedCluster, schemas: None
) -> None:
    body = cluster_queue("lonely", cohort=None, limits={"borrowingLimit": 2})
    code, status = refusal(lambda: create(api, body))
    assert (code, causes(status)["spec"]) == (
        422,
        'Invalid value: "object": borrowingLimit must be nil when cohort is empty',
    )
    body = cluster_queue("team-a")
    body["spec"]["resourceGroups"][0]["coveredResources"].append("ephemeral-storage")
    code, status = refusal(lambda: create(api, body))
    assert causes(status)["spec.resourceGroups[0]"] == (
        'Invalid value: "object": flavors must have the same number of resources as the '
        "coveredResources"
    )
    assert k8s_cluster.list("clusterqueues") == []


def test_a_transition_rule_refuses_an_update_and_leaves_the_object(
    api: CustomObjectsApi, k8s_cluster: EmulatedCluster, schemas: None
) -> None:
    k8s_cluster.create_namespace(A)
    create(api, local_queue(A, "team-a"))
    change = {"spec": {"clusterQueue": "team-b"}}
    code, status = refusal(
        lambda: api.patch_namespaced_custom_object(
            KUEUE, "v1beta2", A, "localqueues", "gpu", change
        )
    )
    assert (code, causes(status)["spec.clusterQueue"]) == (
        422,
        'Invalid value: "string": field is immutable',
    )
    stored = k8s_cluster.get("localqueues", A, "gpu")
    assert stored is not None and stored["spec"]["clusterQueue"] == "team-a"


def test_status_is_a_subresource_and_a_stale_write_is_409(
    api: CustomObjectsApi, k8s_cluster: EmulatedCluster, schemas: None
) -> None:
    created = create(api, cluster_queue("team-a"))
    change = {"status": {"pendingWorkloads": 5}, "spec": {"queueingStrategy": "StrictFIFO"}}
    patched = api.patch_cluster_custom_object(KUEUE, "v1beta2", "clusterqueues", "team-a", change)
    assert patched["spec"]["queueingStrategy"] == "StrictFIFO"
    assert patched["metadata"]["generation"] == 2
    assert (patched.get("status") or {}).get("pendingWorkloads") != 5  # the main resource
    status = api.patch_cluster_custom_object_status(
        KUEUE, "v1beta2", "clusterqueues", "team-a", {"status": {"pendingWorkloads": 5}}
    )
    assert status["status"]["pendingWorkloads"] == 5 and status["metadata"]["generation"] == 2
    created["spec"]["queueingStrategy"] = "BestEffortFIFO"
    code, body = refusal(
        lambda: api.replace_cluster_custom_object(
            KUEUE, "v1beta2", "clusterqueues", "team-a", created
        )
    )
    assert (code, body["reason"]) == (409, "Conflict")
    stored = k8s_cluster.get("clusterqueues", None, "team-a")
    assert stored is not None and stored["spec"]["queueingStrategy"] == "StrictFIFO"


def test_patches_and_scopes_are_those_of_a_custom_resource(
    api: CustomObjectsApi, k8s_cluster: EmulatedCluster, schemas: None
) -> None:
    create(api, flavor())
    ops = [{"op": "replace", "path": "/spec/nodeLabels", "value": {"pool": "h100-b"}}]
    patched = api.patch_cluster_custom_object(
        KUEUE,
        "v1beta2",
        "resourceflavors",
        "h100",
        ops,
        _content_type="application/json-patch+json",
    )
    assert patched["spec"]["nodeLabels"] == {"pool": "h100-b"}
    code, _ = refusal(
        lambda: api.patch_cluster_custom_object(
            KUEUE,
            "v1beta2",
            "resourceflavors",
            "h100",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    )
    assert code == 415
    k8s_cluster.create_namespace(A)
    code, _ = refusal(
        lambda: api.get_namespaced_custom_object(KUEUE, "v1beta2", A, "resourceflavors", "h100")
    )
    assert code == 404  # a cluster-scoped resource has no namespaced path
    listed = api.list_cluster_custom_object(KUEUE, "v1beta2", "resourceflavors")
    assert (listed["kind"], [i["metadata"]["name"] for i in listed["items"]]) == (
        "ResourceFlavorList",
        ["h100"],
    )
    api.delete_cluster_custom_object(KUEUE, "v1beta2", "resourceflavors", "h100")
    assert k8s_cluster.get("resourceflavors", None, "h100") is None


def test_a_put_must_name_the_version_it_replaces(
    api: CustomObjectsApi, k8s_cluster: EmulatedCluster, schemas: None
) -> None:
    created = create(api, cluster_queue("team-a"))
    del created["metadata"]["resourceVersion"]
    created["spec"]["queueingStrategy"] = "StrictFIFO"
    code, status = refusal(
        lambda: api.replace_cluster_custom_object(
            KUEUE, "v1beta2", "clusterqueues", "team-a", created
        )
    )
    assert (code, causes(status)) == (
        422,
        {"metadata.resourceVersion": "Invalid value: 0: must be specified for an update"},
    )
    stored = k8s_cluster.get("clusterqueues", None, "team-a")
    assert stored is not None and stored["spec"]["queueingStrategy"] == "BestEffortFIFO"


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


def test_without_the_crd_files_the_resources_are_served_structurally_and_it_is_said(
    k8s_cluster: EmulatedCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv(crds.CRDS_ENV, str(tmp_path))
    assert crds.missing(crds.KUEUE) == (
        f"the CRD schemas of kueue-v0.19.2 are not in {tmp_path}/kueue-v0.19.2 (set "
        "AJUSTE_TEST_CRDS_DIR to the folder holding kueue-v0.19.2/): its resources are served "
        "with a structural schema only, their fields unchecked"
    )
    k8s_cluster.install_kueue()
    client = k8s_cluster.api_client()
    api = CustomObjectsApi(client)
    created = create(api, cluster_queue("team-a", queueingStrategy="Random"))
    assert created["spec"]["queueingStrategy"] == "Random"  # unchecked, as said
    code, status = refusal(lambda: create(api, {**flavor(), "spec": "h100"}))
    assert (code, causes(status)["spec"]) == (
        422,
        'Invalid value: "string": spec in body must be of type object: "string"',
    )
    client.close()


# -- Kueue's part ------------------------------------------------------------------------------


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
