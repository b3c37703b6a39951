"""Apps on the emulated cluster: deploy, serve, scale up and down, a rolling update to a new
adapter, autoscaling (HPA, KEDA), stop and start at the same URL, delete."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.manifests.common import container_security_context, pod_security_context
from deploy.types import APP_ADAPTER_PATH, AppRequest, Phase, Scaling
from storage.volumes import Mode, VolumeSpec
from tests.deploy.test_app_manifests import make_app_request
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.store import Obj

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("vision_namespace")]

NS = "ajuste-vision"
NAME = "app-5f0c"
URL = "https://app-5f0c.usercontent.ajuste.example/"
NEW_ADAPTER = VolumeSpec("corpus", "GRA", "runs/43/adapter", APP_ADAPTER_PATH, Mode.RO)
APP_OBJECTS = ("deployments", "replicasets", "services", "ingresses", "pods")
AUTOSCALERS = ("horizontalpodautoscalers", "scaledobjects")


@pytest.fixture
def app() -> AppRequest:
    return make_app_request()


def pods(cluster: EmulatedCluster) -> list[Obj]:
    return cluster.pods_of_deployment(NS, NAME)


def serve_all(cluster: EmulatedCluster) -> None:
    """The kubelet runs every pod and the servers answer their probes, until the
    controllers have nothing left to change (a rolling update moves one pod at a time)."""
    for _ in range(20):
        waiting = [p for p in pods(cluster) if p["status"].get("phase") != "Running"]
        if not waiting:
            cluster.reconcile()
            if not [p for p in pods(cluster) if p["status"].get("phase") != "Running"]:
                return
            continue
        for pod in waiting:
            cluster.kubelet.run(NS, pod["metadata"]["name"])
    raise AssertionError("the rollout did not settle")


def uids(cluster: EmulatedCluster) -> set[str]:
    return {p["metadata"]["uid"] for p in pods(cluster)}


def template(cluster: EmulatedCluster) -> Obj:
    deployment = cluster.get("deployments", NS, NAME)
    assert deployment is not None
    return dict(deployment["spec"]["template"])


def test_app_journey_scale_rolling_update_stop_start_delete(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, app: AppRequest
) -> None:
    kubelet = k8s_cluster.kubelet
    first = k8s_backend.apply_app(app=app)
    assert (first.phase, first.replicas, first.url) == (Phase.PENDING, (0, 1), URL)
    for plural in ("deployments", "services"):
        assert k8s_cluster.get(plural, NS, NAME) is not None
    assert k8s_cluster.list("ingresses", NS) == []  # the user-content gateway serves it
    [pod] = pods(k8s_cluster)
    name = pod["metadata"]["name"]

    kubelet.start_init(NS, name, "pull")
    pulling = k8s_backend.observe_app(ref=app.ref)
    assert (pulling.phase, pulling.reason) == (Phase.INITIALIZING, "pulling the model")
    kubelet.run(NS, name, ready=False)
    loading = k8s_backend.observe_app(ref=app.ref)
    assert (loading.phase, loading.reason) == (Phase.INITIALIZING, "loading the model")
    kubelet.run(NS, name)
    running = k8s_backend.observe_app(ref=app.ref)
    assert (running.phase, running.replicas, running.reason) == (Phase.RUNNING, (1, 1), "ready")
    assert running.run_uid == pod["metadata"]["uid"] and running.started_at is not None

    # Scale up: the same Deployment, two more pods; SCALING until they serve.
    three = replace(app, scaling=Scaling(min_replicas=3, max_replicas=3))
    scaling = k8s_backend.apply_app(app=three)
    assert (scaling.phase, scaling.replicas) == (Phase.RUNNING, (1, 3))
    assert len(pods(k8s_cluster)) == 3
    serve_all(k8s_cluster)
    three_up = k8s_backend.observe_app(ref=app.ref)
    assert three_up.replicas == (3, 3)
    # Each replica is billed apart: its pod's UID, from its server's start.
    assert {r.uid for r in three_up.replica_runs or ()} == uids(k8s_cluster)
    assert all(r.started_at and r.finished_at is None for r in three_up.replica_runs or ())

    # Back down to one: the first pod keeps serving; the two others run (and are billed)
    # until their kubelet has stopped them.
    down = k8s_backend.apply_app(app=app)
    assert down.replicas == (1, 1)
    assert [p["metadata"]["name"] for p in pods(k8s_cluster)] == [name]
    assert len(down.replica_runs or ()) == 3
    k8s_cluster.reconcile()
    down = k8s_backend.observe_app(ref=app.ref)
    assert [r.uid for r in down.replica_runs or ()] == [pod["metadata"]["uid"]]

    # A new adapter: a rolling update of the same Deployment (new template, same uid), one
    # new pod at a time, the old one serving until the new one is ready.
    uid = k8s_cluster.get("deployments", NS, NAME)["metadata"]["uid"]  # type: ignore[index]
    before = template(k8s_cluster)
    updated = replace(app, adapter=NEW_ADAPTER)
    rolling = k8s_backend.apply_app(app=updated)
    assert k8s_cluster.get("deployments", NS, NAME)["metadata"]["uid"] == uid  # type: ignore[index]
    assert template(k8s_cluster) != before
    assert (
        "corpus@GRA/runs/43/adapter:/workspace/adapter:ro"
        in (template(k8s_cluster)["spec"]["initContainers"][0]["command"])
    )
    assert (rolling.phase, rolling.replicas) == (Phase.RUNNING, (0, 1))  # old pod serves
    during = pods(k8s_cluster)
    assert len(during) == 2 and name in {p["metadata"]["name"] for p in during}
    serve_all(k8s_cluster)
    [new_pod] = pods(k8s_cluster)
    assert new_pod["metadata"]["name"] != name
    done = k8s_backend.observe_app(ref=app.ref)
    assert (done.phase, done.replicas) == (Phase.RUNNING, (1, 1))
    assert done.run_uid == new_pod["metadata"]["uid"]
    assert [r.uid for r in done.replica_runs or ()] == [new_pod["metadata"]["uid"]]
    assert len(k8s_cluster.list("replicasets", NS)) == 2  # the old one kept at zero

    # Re-applying the same request changes nothing.
    version = k8s_cluster.get("deployments", NS, NAME)["metadata"]["resourceVersion"]  # type: ignore[index]
    assert k8s_backend.apply_app(app=updated).replicas == (1, 1)
    assert k8s_cluster.get("deployments", NS, NAME)["metadata"]["resourceVersion"] == version  # type: ignore[index]

    # Stop: STOPPING while the pod terminates, then no pod, the address kept; start again at
    # the same URL.
    stopping = k8s_backend.apply_app(app=replace(updated, running=False))
    assert (stopping.phase, stopping.url) == (Phase.STOPPING, URL)
    assert pods(k8s_cluster) == []
    k8s_cluster.reconcile()  # its kubelet stops it
    stopped = k8s_backend.observe_app(ref=app.ref)
    assert (stopped.phase, stopped.url, stopped.replica_runs) == (Phase.STOPPED, URL, ())
    assert k8s_cluster.list("pods", NS) == []
    assert k8s_cluster.get("services", NS, NAME) is not None
    again = k8s_backend.apply_app(app=updated)
    assert (again.phase, again.url) == (Phase.PENDING, URL)
    serve_all(k8s_cluster)
    assert k8s_backend.observe_app(ref=app.ref).phase is Phase.RUNNING

    k8s_backend.delete_app(ref=app.ref)
    k8s_backend.delete_app(ref=app.ref)
    assert k8s_backend.observe_app(ref=app.ref).phase is Phase.GONE
    k8s_cluster.reconcile()
    for plural in (*APP_OBJECTS, *AUTOSCALERS):
        assert k8s_cluster.list(plural, NS) == []


def test_autoscaled_app_leaves_the_count_to_the_hpa(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, app: AppRequest
) -> None:
    auto = replace(app, scaling=Scaling(min_replicas=2, max_replicas=6, target_cpu=70))
    k8s_backend.apply_app(app=auto)
    hpa = k8s_cluster.get("horizontalpodautoscalers", NS, NAME)
    assert hpa is not None and hpa["spec"]["minReplicas"] == 2
    assert k8s_cluster.get("deployments", NS, NAME)["spec"]["replicas"] == 2  # type: ignore[index]
    serve_all(k8s_cluster)
    # The HPA scales to 4 (what its controller would do under load).
    k8s_cluster.store.patch("deployments", NS, NAME, {"spec": {"replicas": 4}})
    k8s_cluster.reconcile()
    serve_all(k8s_cluster)
    # A new model is rolled out without resetting the autoscaler's count.
    k8s_backend.apply_app(app=replace(auto, adapter=NEW_ADAPTER))
    assert k8s_cluster.get("deployments", NS, NAME)["spec"]["replicas"] == 4  # type: ignore[index]
    serve_all(k8s_cluster)
    assert k8s_backend.observe_app(ref=app.ref).replicas == (4, 4)

    # Fixed again: the HPA goes, the Deployment takes the fixed count.
    fixed = k8s_backend.apply_app(app=replace(app, adapter=NEW_ADAPTER))
    assert k8s_cluster.list("horizontalpodautoscalers", NS) == []
    assert fixed.replicas == (1, 1)


def test_keda_scales_to_zero_and_stop_is_told_apart(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, app: AppRequest
) -> None:
    to_zero = replace(
        app, keda=True, scaling=Scaling(min_replicas=0, max_replicas=4, target_rps=10)
    )
    k8s_backend.apply_app(app=to_zero)
    scaled = k8s_cluster.get("scaledobjects", NS, NAME)
    assert scaled is not None and scaled["spec"]["minReplicaCount"] == 0
    assert k8s_cluster.list("horizontalpodautoscalers", NS) == []
    serve_all(k8s_cluster)
    # KEDA scales the idle app to zero: still RUNNING (it wakes on the next request).
    k8s_cluster.store.patch("deployments", NS, NAME, {"spec": {"replicas": 0}})
    k8s_cluster.reconcile()
    idle = k8s_backend.observe_app(ref=app.ref)
    assert (idle.phase, idle.replicas, idle.reason) == (Phase.RUNNING, (0, 0), "scaled to zero")
    # Reconciling again does not wake it up.
    k8s_backend.apply_app(app=to_zero)
    assert k8s_cluster.get("deployments", NS, NAME)["spec"]["replicas"] == 0  # type: ignore[index]

    stopped = k8s_backend.apply_app(app=replace(to_zero, running=False))
    assert stopped.phase is Phase.STOPPED
    assert k8s_cluster.list("scaledobjects", NS) == []
    # Started again: one replica at once, the ScaledObject back.
    k8s_backend.apply_app(app=to_zero)
    assert k8s_cluster.get("deployments", NS, NAME)["spec"]["replicas"] == 1  # type: ignore[index]
    assert k8s_cluster.get("scaledobjects", NS, NAME) is not None


def test_failures_say_why(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, app: AppRequest
) -> None:
    k8s_backend.apply_app(app=app)
    [pod] = pods(k8s_cluster)
    name = pod["metadata"]["name"]
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    k8s_cluster.kubelet.unschedulable(NS, name, message)
    assert k8s_backend.observe_app(ref=app.ref).reason == message

    # The kubelet restarts a failed init container of a Deployment's pod (restartPolicy
    # Always): the pod stays Pending, the pull in back-off with its last exit.
    k8s_cluster.kubelet.schedule(NS, name)
    pull = {
        "name": "pull",
        "ready": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
        "lastState": {
            "terminated": {
                "exitCode": 1,
                "reason": "Error",
                "message": "NoSuchKey: runs/42/adapter",
            }
        },
    }
    k8s_cluster.store.patch("pods", NS, name, {"status": {"initContainerStatuses": [pull]}})
    failed = k8s_backend.observe_app(ref=app.ref)
    assert (failed.phase, failed.reason) == (
        Phase.FAILED,
        "model pull failed: NoSuchKey: runs/42/adapter",
    )


def test_crash_looping_server_is_failed_with_its_exit_code(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, app: AppRequest
) -> None:
    k8s_backend.apply_app(app=app)
    [pod] = pods(k8s_cluster)
    name = pod["metadata"]["name"]
    k8s_cluster.kubelet.run(NS, name, ready=False)
    main = {
        "name": "main",
        "ready": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }
    k8s_cluster.store.patch("pods", NS, name, {"status": {"containerStatuses": [main]}})
    observed = k8s_backend.observe_app(ref=app.ref)
    assert (observed.phase, observed.exit_code, observed.reason) == (
        Phase.FAILED,
        1,
        "the server exits (exit code 1)",
    )


def test_sweep_and_watch_observe_apps(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, app: AppRequest
) -> None:
    k8s_backend.apply_app(app=app)
    serve_all(k8s_cluster)
    [seen] = k8s_backend.observe_all(namespace=NS)
    assert (seen.kind, seen.id, seen.phase, seen.replicas) == (
        app.ref.kind,
        "5f0c",
        Phase.RUNNING,
        (1, 1),
    )
    # A pod that only carries the app's labels is not one of its replicas.
    forged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "forged",
            "namespace": NS,
            "labels": dict(pods(k8s_cluster)[0]["metadata"]["labels"]),
        },
        "spec": {  # as the namespace's Pod Security `restricted` requires
            "securityContext": pod_security_context(),
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "securityContext": container_security_context(),
                }
            ],
        },
    }
    k8s_cluster.create(forged)
    assert k8s_backend.observe_app(ref=app.ref).replicas == (1, 1)
    assert k8s_backend._observe_after_event(app.ref, None).phase is Phase.RUNNING


def test_the_emulator_refuses_a_malformed_scaled_object(
    k8s_backend: KubernetesBackend, app: AppRequest
) -> None:
    """ScaledObject is a CRD: the emulator checks its structural shape (our own check, the
    official schemas do not have it), strictly like the others."""
    from deploy.kubernetes.apply import apply
    from deploy.manifests import make_app_scaled_object
    from deploy.types import DeployError

    scaled = make_app_scaled_object(
        app=replace(app, keda=True, scaling=Scaling(min_replicas=0, max_replicas=2, target_rps=1))
    )
    unknown = {**scaled, "spec": {**scaled["spec"], "minReplicas": 0}}
    with pytest.raises(
        DeployError, match=r'unknown field \\"spec.minReplicas\\"|unknown field "spec.minReplicas"'
    ):
        apply(k8s_backend.api, unknown)
    no_trigger = {**scaled, "spec": {**scaled["spec"], "triggers": []}}
    with pytest.raises(DeployError, match="422"):
        apply(k8s_backend.api, no_trigger)
    apply(k8s_backend.api, scaled)
