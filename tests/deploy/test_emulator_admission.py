"""The emulator's admission, driven through the official client as a real API server would be:
Pod Security (restricted, baseline, privileged namespaces; direct creates and the controllers'
pods), ResourceQuota (every create: compute, extended resources, object counts, storage; its
status kept), LimitRange (defaults, then min/max). Each refusal is the server's 403 with its
message, and nothing is created."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = [pytest.mark.k8s]

NS = "emulated"
Obj = dict[str, Any]
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def container(name: str = "main", **resources: dict[str, str]) -> Obj:
    found: Obj = {"name": name, "image": "busybox", "securityContext": dict(RESTRICTED_CONTAINER)}
    if resources:
        found["resources"] = resources
    return found


def pod(name: str = "p", *containers: Obj, **spec: Any) -> Obj:
    """A pod that passes `restricted` unless `spec` says otherwise."""
    body: Obj = {
        "securityContext": dict(RESTRICTED_POD),
        "containers": list(containers) or [container()],
    }
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def refused(call: Callable[[], object]) -> tuple[int, str]:
    with pytest.raises(ApiException) as raised:
        call()
    return raised.value.status, json.loads(raised.value.body)["message"]


@pytest.fixture
def client(k8s_cluster: EmulatedCluster) -> Iterator[ApiClient]:
    api_client = k8s_cluster.api_client()
    yield api_client
    api_client.close()


@pytest.fixture
def core(client: ApiClient) -> CoreV1Api:
    return CoreV1Api(client)


def namespace(cluster: EmulatedCluster, level: str | None) -> None:
    labels = {"pod-security.kubernetes.io/enforce": level} if level else {}
    cluster.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": labels}}
    )


# -- Pod Security ------------------------------------------------------------------------------


def test_restricted_refuses_a_privileged_root_host_network_pod_with_every_reason(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    namespace(k8s_cluster, "restricted")
    bad = pod(
        "rooted",
        {"name": "shell", "image": "busybox", "securityContext": {"privileged": True}},
        securityContext={"runAsUser": 0},
        hostNetwork=True,
        volumes=[{"name": "host", "hostPath": {"path": "/"}}],
    )
    code, message = refused(lambda: core.create_namespaced_pod(NS, bad))
    assert code == 403
    assert message.startswith(
        'pods "rooted" is forbidden: violates PodSecurity "restricted:latest": '
    )
    for part in (
        "host namespaces (hostNetwork=true)",
        'privileged (container "shell" must not set securityContext.privileged=true)',
        'allowPrivilegeEscalation != false (container "shell" must set '
        "securityContext.allowPrivilegeEscalation=false)",
        'unrestricted capabilities (container "shell" must set '
        'securityContext.capabilities.drop=["ALL"])',
        'restricted volume types (volume "host" uses restricted volume type "hostPath")',
        'runAsNonRoot != true (pod or container "shell" must set '
        "securityContext.runAsNonRoot=true)",
        "runAsUser=0 (pod must not set runAsUser=0)",
        'seccompProfile (pod or container "shell" must set securityContext.seccompProfile.type '
        'to "RuntimeDefault" or "Localhost")',
    ):
        assert part in message
    assert k8s_cluster.list("pods") == []
    # The same pod made to comply is accepted: the refusal is the policy's, not a blanket one.
    assert core.create_namespaced_pod(NS, pod("compliant")).metadata.name == "compliant"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda p: p["spec"].update(hostPID=True), "host namespaces (hostPID=true)"),
        (
            lambda p: p["spec"]["containers"][0]["securityContext"].update(
                capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}
            ),
            'must not include "SYS_ADMIN" in securityContext.capabilities.add',
        ),
        (
            lambda p: p["spec"]["containers"][0]["securityContext"].update(
                allowPrivilegeEscalation=True
            ),
            "allowPrivilegeEscalation != false",
        ),
        (
            lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
            'pod must not set securityContext.seccompProfile.type to "Unconfined"',
        ),
        (
            lambda p: p["spec"]["securityContext"].update(runAsNonRoot=False),
            "pod must not set securityContext.runAsNonRoot=false",
        ),
    ],
    ids=["host-pid", "added-capability", "privilege-escalation", "unconfined-seccomp", "root"],
)
def test_restricted_refuses_each_check_alone(
    k8s_cluster: EmulatedCluster, core: CoreV1Api, change: Callable[[Obj], object], reason: str
) -> None:
    namespace(k8s_cluster, "restricted")
    body = pod()
    change(body)
    code, message = refused(lambda: core.create_namespaced_pod(NS, body))
    assert code == 403 and "violates PodSecurity" in message and reason in message
    assert k8s_cluster.list("pods") == []


def test_baseline_refuses_host_access_but_not_what_only_restricted_asks(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    namespace(k8s_cluster, "baseline")
    root = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"}}
    root["spec"] = {"containers": [{"name": "main", "image": "busybox"}]}
    assert core.create_namespaced_pod(NS, root).metadata.name == "root"  # root is baseline
    host = copy.deepcopy(root)
    host["metadata"]["name"], host["spec"]["hostNetwork"] = "host", True
    code, message = refused(lambda: core.create_namespaced_pod(NS, host))
    assert code == 403 and 'violates PodSecurity "baseline:latest": host namespaces' in message


def test_an_unlabelled_namespace_is_privileged(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    namespace(k8s_cluster, None)
    body = pod("any", securityContext={"runAsUser": 0}, hostNetwork=True)
    assert core.create_namespaced_pod(NS, body).spec.host_network is True


def test_the_controllers_pods_are_refused_as_failed_creates(
    k8s_cluster: EmulatedCluster, client: ApiClient
) -> None:
    """A template that violates the policy is accepted (only pods are checked); the pods its
    controller would make are refused, as FailedCreate events quoting the server."""
    namespace(k8s_cluster, "restricted")
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container()]}}
    template["spec"]["hostIPC"] = True
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
    job["spec"] = {"template": {**copy.deepcopy(template), "spec": {**template["spec"]}}}
    job["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    BatchV1Api(client).create_namespaced_job(NS, job)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    deployment["spec"] = {"selector": {"matchLabels": {"app": "x"}}, "template": template}
    AppsV1Api(client).create_namespaced_deployment(NS, deployment)
    stateful = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"}}
    stateful["spec"] = {**deployment["spec"], "serviceName": "s"}
    AppsV1Api(client).create_namespaced_stateful_set(NS, stateful)
    k8s_cluster.reconcile()
    assert k8s_cluster.list("pods") == []
    events = {e["involvedObject"]["kind"]: e for e in k8s_cluster.list("events", NS)}
    assert {e["reason"] for e in events.values()} == {"FailedCreate"}
    assert events.keys() == {"Job", "ReplicaSet", "StatefulSet"}
    assert events["Job"]["message"].startswith('Error creating: pods "j-" is forbidden: violates')
    assert "host namespaces (hostIPC=true)" in events["ReplicaSet"]["message"]
    assert events["StatefulSet"]["message"].startswith(
        'create Pod s-0 in StatefulSet s failed error: pods "s-0" is forbidden: violates'
    )


# -- ResourceQuota -----------------------------------------------------------------------------


def quota(cluster: EmulatedCluster, **hard: str) -> None:
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": NS}}
    body["spec"] = {
        "hard": {key.replace("__", "/").replace("_", "."): v for key, v in hard.items()}
    }
    cluster.create(body)


def gpus(count: str) -> Obj:
    amounts = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": count}
    return container(requests=dict(amounts), limits=dict(amounts))


def test_a_direct_pod_over_the_gpu_quota_is_refused_with_the_servers_message(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    namespace(k8s_cluster, "restricted")
    quota(k8s_cluster, **{"requests_nvidia.com__gpu": "1"})
    code, message = refused(lambda: core.create_namespaced_pod(NS, pod("notebook-0", gpus("4"))))
    assert (code, message) == (
        403,
        'pods "notebook-0" is forbidden: exceeded quota: q, requested: '
        "requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=0, "
        "limited: requests.nvidia.com/gpu=1",
    )
    assert k8s_cluster.list("pods") == []
    core.create_namespaced_pod(NS, pod("one", gpus("1")))  # within the quota
    status = core.read_namespaced_resource_quota("q", NS).status
    assert status.used == {"requests.nvidia.com/gpu": "1"}
    assert refused(lambda: core.create_namespaced_pod(NS, pod("two", gpus("1"))))[0] == 403


def test_object_counts_and_limits_are_enforced_on_every_create(
    k8s_cluster: EmulatedCluster, core: CoreV1Api, client: ApiClient
) -> None:
    namespace(k8s_cluster, "restricted")
    quota(k8s_cluster, pods="1", secrets="1", count__jobs_batch="0", limits_cpu="2")
    no_limit = pod("bare", container(requests={"cpu": "1"}))
    code, message = refused(lambda: core.create_namespaced_pod(NS, no_limit))
    assert (code, message) == (
        403,
        'pods "bare" is forbidden: failed quota: q: must specify limits.cpu for: main',
    )
    core.create_namespaced_pod(NS, pod("first", container(limits={"cpu": "1"})))
    code, message = refused(
        lambda: core.create_namespaced_pod(NS, pod("second", container(limits={"cpu": "1"})))
    )
    assert (
        code == 403
        and "exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1" in message
    )
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}}
    core.create_namespaced_secret(NS, secret)
    code, message = refused(
        lambda: core.create_namespaced_secret(NS, {**secret, "metadata": {"name": "s2"}})
    )
    assert code == 403 and message.startswith('secrets "s2" is forbidden: exceeded quota: q')
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
    job["spec"] = {"template": {"spec": {"containers": [container()], "restartPolicy": "Never"}}}
    code, message = refused(lambda: BatchV1Api(client).create_namespaced_job(NS, job))
    assert code == 403 and "requested: count/jobs.batch=1, used: count/jobs.batch=0" in message
    assert [s["metadata"]["name"] for s in k8s_cluster.list("secrets", NS)] == ["s1"]
    assert k8s_cluster.list("jobs", NS) == []


def test_claims_count_against_requests_storage_and_the_status_follows_deletes(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    namespace(k8s_cluster, "restricted")
    quota(k8s_cluster, requests_storage="100Gi", persistentvolumeclaims="5")

    def claim(name: str, size: str) -> Obj:
        spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
        body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}}
        return {**body, "spec": spec}

    core.create_namespaced_persistent_volume_claim(NS, claim("a", "60Gi"))
    code, message = refused(
        lambda: core.create_namespaced_persistent_volume_claim(NS, claim("b", "50Gi"))
    )
    assert code == 403 and message == (
        'persistentvolumeclaims "b" is forbidden: exceeded quota: q, requested: '
        "requests.storage=50Gi, used: requests.storage=60Gi, limited: requests.storage=100Gi"
    )
    used = core.read_namespaced_resource_quota("q", NS).status.used
    assert used == {"requests.storage": "60Gi", "persistentvolumeclaims": "1"}
    core.delete_namespaced_persistent_volume_claim("a", NS)
    k8s_cluster.reconcile()  # the quota controller's recount
    used = core.read_namespaced_resource_quota("q", NS).status.used
    assert used == {"requests.storage": "0", "persistentvolumeclaims": "0"}
    core.create_namespaced_persistent_volume_claim(NS, claim("b", "50Gi"))


def test_a_jobs_pods_are_refused_by_the_quota_as_failed_creates(
    k8s_cluster: EmulatedCluster, client: ApiClient
) -> None:
    namespace(k8s_cluster, "restricted")
    quota(k8s_cluster, **{"requests_nvidia.com__gpu": "1"})
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}}
    job["spec"] = {
        "template": {
            "spec": {
                "securityContext": dict(RESTRICTED_POD),
                "containers": [gpus("2")],
                "restartPolicy": "Never",
            }
        }
    }
    BatchV1Api(client).create_namespaced_job(NS, job)
    [event] = k8s_cluster.list("events", NS)
    assert event["message"] == (
        'Error creating: pods "train-" is forbidden: exceeded quota: q, requested: '
        "requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=0, "
        "limited: requests.nvidia.com/gpu=1"
    )
    assert k8s_cluster.list("pods") == []


# -- LimitRange --------------------------------------------------------------------------------


def limits(cluster: EmulatedCluster, *items: Obj) -> None:
    body = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "l", "namespace": NS}}
    cluster.create({**body, "spec": {"limits": list(items)}})


def test_limit_range_defaults_fill_containers_that_state_nothing(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    namespace(k8s_cluster, "restricted")
    limits(
        k8s_cluster,
        {
            "type": "Container",
            "default": {"cpu": "1", "memory": "2Gi"},
            "defaultRequest": {"cpu": "500m"},
        },
    )
    made = core.create_namespaced_pod(
        NS, pod("d", container(), container("side", limits={"cpu": "2"}))
    )
    main, side = made.spec.containers
    assert (main.resources.requests, main.resources.limits) == (
        {"cpu": "500m", "memory": "2Gi"},  # no defaultRequest for memory: the default limit
        {"cpu": "1", "memory": "2Gi"},
    )
    # A stated limit stays, and its request defaults to it before LimitRange's defaults.
    assert (side.resources.requests, side.resources.limits) == (
        {"cpu": "2", "memory": "2Gi"},
        {"cpu": "2", "memory": "2Gi"},
    )
    assert made.metadata.annotations["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container main; cpu, memory limit for "
        "container main; memory request for container side; memory limit for container side"
    )


def test_limit_range_bounds_refuse_with_each_problem(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    namespace(k8s_cluster, "restricted")
    limits(
        k8s_cluster,
        {"type": "Container", "min": {"cpu": "100m"}, "max": {"memory": "1Gi"}},
        {"type": "PersistentVolumeClaim", "max": {"storage": "10Gi"}},
    )
    small = container(
        requests={"cpu": "50m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "2Gi"}
    )
    code, message = refused(lambda: core.create_namespaced_pod(NS, pod("small", small)))
    assert (code, message) == (
        403,
        'pods "small" is forbidden: [minimum cpu usage per Container is 100m, but request is 50m, '
        "maximum memory usage per Container is 1Gi, but limit is 2Gi]",
    )
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "big"}}
    claim["spec"] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "20Gi"}},
    }
    code, message = refused(lambda: core.create_namespaced_persistent_volume_claim(NS, claim))
    assert (code, message) == (
        403,
        'persistentvolumeclaims "big" is forbidden: maximum storage usage per '
        "PersistentVolumeClaim is 10Gi, but limit is 20Gi",
    )
    assert k8s_cluster.list("pods") == k8s_cluster.list("persistentvolumeclaims") == []
    fits = container(requests={"cpu": "100m"}, limits={"cpu": "1", "memory": "1Gi"})
    assert core.create_namespaced_pod(NS, pod("fits", fits)).metadata.name == "fits"
