"""Kueue's custom resources served by the emulator as a real API server with Kueue v0.19.2's
CRDs serves them, through the official client's CustomObjectsApi: defaults, both served versions
(v1beta1 converted to the stored v1beta2 and back), the schema's refusals with the server's
causes, CEL and transition rules, strict decoding, the status subresource, resourceVersion
conflicts, patch formats, scopes, watches, and the structural fallback where the CRD files are
absent (said in a sentence)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import CustomObjectsApi

from tests.deploy.kueue_objects import (
    KUEUE,
    causes,
    cluster_queue,
    create,
    flavor,
    local_queue,
    need_schemas,
    refusal,
)
from tests.fixtures.k8s_emulator import EmulatedCluster, crds
from tests.fixtures.k8s_emulator.kueue import KueueHandle

pytestmark = pytest.mark.k8s

A = "team-a"


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
