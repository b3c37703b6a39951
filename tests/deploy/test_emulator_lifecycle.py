"""The emulator authenticates and deletes as a real API server: 401 without its bearer token;
pods on a node go Terminating (deletionTimestamp = now + grace, deletionGracePeriodSeconds)
until their kubelet has stopped them; finalizers hold any object; a claim in use by a pod
stays Terminating until the pod has gone; a namespace goes once it is empty. Driven through
the official client."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import urllib3
from kubernetes.client import ApiClient, Configuration, CoreV1Api, V1DeleteOptions
from kubernetes.client.exceptions import ApiException

from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = [pytest.mark.k8s]

NS = "lifecycle"
Obj = dict[str, Any]
SECURE = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER = {
    "name": "main",
    "image": "busybox",
    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
}


@pytest.fixture
def core(k8s_cluster: EmulatedCluster) -> Iterator[CoreV1Api]:
    k8s_cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    client = k8s_cluster.api_client()
    yield CoreV1Api(client)
    client.close()


def pod(name: str, *, claim: str | None = None, grace: int | None = None) -> Obj:
    spec: Obj = {"securityContext": SECURE, "containers": [dict(CONTAINER)]}
    if claim:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def running(cluster: EmulatedCluster, core: CoreV1Api, name: str, **options: Any) -> None:
    core.create_namespaced_pod(NS, pod(name, **options))
    cluster.kubelet.run(NS, name)


def when(stamp: Any) -> datetime:
    return stamp if isinstance(stamp, datetime) else datetime.fromisoformat(stamp)


# -- authentication ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer not-the-token"}, {"Authorization": "Basic YWRtaW46YWRtaW4="}],
    ids=["no-credentials", "wrong-token", "basic"],
)
@pytest.mark.parametrize("path", ["/api/v1/namespaces", "/api/v1/namespaces/x/pods", "/version"])
def test_a_request_without_the_token_is_401_on_every_path(
    k8s_cluster: EmulatedCluster, headers: dict[str, str], path: str
) -> None:
    before = k8s_cluster.request_count
    response = urllib3.request("GET", k8s_cluster.url + path, headers=headers)
    assert response.status == 401
    assert response.json() == {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
    assert k8s_cluster.request_count == before  # refused before anything was served


def test_the_official_client_needs_the_credentials_the_fixtures_give_it(
    k8s_cluster: EmulatedCluster,
) -> None:
    anonymous = Configuration()
    anonymous.host = k8s_cluster.url
    with ApiClient(anonymous) as client, pytest.raises(ApiException) as raised:
        CoreV1Api(client).list_namespace()
    assert raised.value.status == 401
    with k8s_cluster.api_client() as client:
        assert CoreV1Api(client).list_namespace().items == []
    from kubernetes import config

    configured = Configuration()
    config.load_kube_config(config_file=k8s_cluster.kubeconfig, client_configuration=configured)
    with ApiClient(configured) as client:
        assert CoreV1Api(client).list_namespace().items == []


# -- graceful deletion -------------------------------------------------------------------------


def test_a_pod_on_a_node_terminates_until_its_kubelet_stops_it(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    running(k8s_cluster, core, "p", grace=45)
    before = datetime.now(UTC)
    answered = core.delete_namespaced_pod("p", NS)
    assert answered.metadata.deletion_grace_period_seconds == 45
    deadline = when(answered.metadata.deletion_timestamp)
    assert before + timedelta(seconds=44) <= deadline <= before + timedelta(seconds=47)
    terminating = core.read_namespaced_pod("p", NS)  # still there, still running
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.status.phase == "Running"
    core.delete_namespaced_pod("p", NS)  # a second delete changes nothing
    assert core.read_namespaced_pod("p", NS).metadata.deletion_grace_period_seconds == 45
    k8s_cluster.reconcile()  # the kubelet: SIGTERM, the containers stop, the deletion confirmed
    with pytest.raises(ApiException) as raised:
        core.read_namespaced_pod("p", NS)
    assert raised.value.status == 404
    [gone] = [e for e in k8s_cluster.store.events if e.type == "DELETED" and e.plural == "pods"]
    assert gone.obj["metadata"]["deletionGracePeriodSeconds"] == 0
    stopped = gone.obj["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (gone.obj["status"]["phase"], stopped["exitCode"]) == ("Failed", 143)


def test_a_pod_that_ignores_sigterm_is_killed_when_its_grace_period_ends(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    k8s_cluster.kubelet.ignore_sigterm = True
    running(k8s_cluster, core, "stubborn", grace=30)
    core.delete_namespaced_pod("stubborn", NS)
    k8s_cluster.advance(29)
    assert core.read_namespaced_pod("stubborn", NS).metadata.deletion_timestamp is not None
    k8s_cluster.advance(2)
    assert k8s_cluster.get("pods", NS, "stubborn") is None
    [gone] = [e for e in k8s_cluster.store.events if e.type == "DELETED" and e.plural == "pods"]
    assert gone.obj["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


def test_pods_never_scheduled_or_ended_and_forced_deletes_go_at_once(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    core.create_namespaced_pod(NS, pod("pending"))  # no node: nothing to stop
    core.delete_namespaced_pod("pending", NS)
    running(k8s_cluster, core, "done")
    k8s_cluster.kubelet.finish(NS, "done", exit_code=0)
    core.delete_namespaced_pod("done", NS)
    running(k8s_cluster, core, "forced")
    core.delete_namespaced_pod("forced", NS, body=V1DeleteOptions(grace_period_seconds=0))
    assert k8s_cluster.list("pods", NS) == []


def test_a_finalizer_holds_an_object_until_it_is_removed(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held"}}
    body["metadata"]["finalizers"] = ["example.com/cleanup"]
    core.create_namespaced_config_map(NS, body)
    core.delete_namespaced_config_map("held", NS)
    k8s_cluster.reconcile()
    held = core.read_namespaced_config_map("held", NS)
    assert held.metadata.deletion_timestamp is not None
    assert held.metadata.finalizers == ["example.com/cleanup"]
    more = {"metadata": {"finalizers": ["example.com/cleanup", "example.com/late"]}}
    with pytest.raises(ApiException) as raised:
        core.patch_namespaced_config_map("held", NS, more)
    assert raised.value.status == 422
    assert "no new finalizers can be added if the object is being deleted" in raised.value.body
    core.patch_namespaced_config_map("held", NS, {"metadata": {"finalizers": None}})
    assert k8s_cluster.get("configmaps", NS, "held") is None


# -- claim protection and namespaces -----------------------------------------------------------


def claim(core: CoreV1Api, name: str) -> None:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}}
    created = core.create_namespaced_persistent_volume_claim(NS, {**body, "spec": spec})
    assert created.metadata.finalizers == ["kubernetes.io/pvc-protection"]


def test_a_claim_in_use_stays_terminating_until_its_pod_has_gone(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    claim(core, "data")
    running(k8s_cluster, core, "user", claim="data")
    core.delete_namespaced_persistent_volume_claim("data", NS)
    k8s_cluster.reconcile()
    k8s_cluster.kubelet.finish(NS, "user", exit_code=0)  # an ended pod still holds it
    kept = core.read_namespaced_persistent_volume_claim("data", NS)
    assert kept.metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("user", NS)
    k8s_cluster.reconcile()
    assert k8s_cluster.get("persistentvolumeclaims", NS, "data") is None
    claim(core, "free")  # a claim no pod mounts goes at once
    core.delete_namespaced_persistent_volume_claim("free", NS)
    assert k8s_cluster.get("persistentvolumeclaims", NS, "free") is None


def test_a_namespace_goes_once_its_terminating_pods_have(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    k8s_cluster.kubelet.ignore_sigterm = True
    claim(core, "data")
    running(k8s_cluster, core, "slow", claim="data", grace=60)
    core.delete_namespace(NS)
    k8s_cluster.reconcile()
    assert core.read_namespace(NS).status.phase == "Terminating"
    assert core.read_namespaced_pod("slow", NS).metadata.deletion_timestamp is not None
    k8s_cluster.advance(61)
    assert k8s_cluster.list("pods") == k8s_cluster.list("persistentvolumeclaims") == []
    assert k8s_cluster.get("namespaces", None, NS) is None
