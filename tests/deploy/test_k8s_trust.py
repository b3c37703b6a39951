"""Labels prove nothing: a pod or Job that only claims to be one of our runs (from another
namespace, or beside ours but not created by the run's Job) changes no observation."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.apply import with_hash
from deploy.manifests import make_job
from deploy.types import JobRequest, ObservedWorkload, Phase
from tests.deploy.conftest import DATASET, make_job_request, project_namespace
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("vision_namespace")]

NS = "ajuste-vision"
WAIT_S = 10.0


@pytest.fixture
def ours() -> JobRequest:
    """Run 1 of job 42 in project vision, an ro volume only (no claim)."""
    return make_job_request(volumes=(DATASET,))


def forge_job(cluster: EmulatedCluster, job: JobRequest, *, namespace: str, name: str) -> str:
    """A Job with every label and annotation of `job`'s run, made by someone else; its pod
    (made by the Job controller) fails at once. Returns the pod's name."""
    manifest = make_job(job=job)
    manifest["metadata"] = {**manifest["metadata"], "namespace": namespace, "name": name}
    cluster.create(with_hash(manifest))
    pod = cluster.pod_of(namespace, name)
    cluster.kubelet.run(namespace, pod)
    cluster.kubelet.finish(namespace, pod, exit_code=1, message="forged")
    return pod


def forge_pod(cluster: EmulatedCluster, job: JobRequest) -> None:
    """A bare pod in our namespace with our labels and the name our Job's pods get."""
    template = make_job(job=job)["spec"]["template"]
    metadata = {**template["metadata"], "name": "job-42-r1-forged", "namespace": NS}
    cluster.create(
        {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
    )
    cluster.kubelet.run(NS, "job-42-r1-forged")
    cluster.kubelet.finish(NS, "job-42-r1-forged", exit_code=1, message="forged")


def only_ours(observed: list[ObservedWorkload]) -> ObservedWorkload:
    assert [(o.namespace, o.id, o.run) for o in observed] == [(NS, "42", 1)]
    return observed[0]


def test_another_namespace_cannot_speak_for_a_run(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, ours: JobRequest
) -> None:
    k8s_backend.apply_job(job=ours)
    k8s_cluster.create_namespace("mallory")
    forge_job(k8s_cluster, ours, namespace="mallory", name="job-42-r1")
    # A project namespace of Ajuste's, but another project's: vision's runs are not there.
    nlp = project_namespace(k8s_cluster, "nlp")
    forge_job(k8s_cluster, ours, namespace=nlp, name="job-42-r1")

    assert only_ours(k8s_backend.observe_all()).phase is Phase.PENDING
    assert k8s_backend.observe_all(namespace="mallory") == []


def test_a_job_or_pod_beside_ours_that_the_run_did_not_make_is_ignored(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, ours: JobRequest
) -> None:
    k8s_backend.apply_job(job=ours)
    real_pod = k8s_cluster.pod_of(NS, "job-42-r1")
    k8s_cluster.kubelet.run(NS, real_pod)
    k8s_cluster.kubelet.log(NS, real_pod, "the real run")
    forge_job(k8s_cluster, ours, namespace=NS, name="job-evil")
    forge_pod(k8s_cluster, ours)

    assert k8s_backend.observe_job(ref=ours.ref).phase is Phase.RUNNING
    assert only_ours(k8s_backend.observe_all()).phase is Phase.RUNNING
    assert k8s_backend.read_logs(ref=ours.ref, cursor=None).lines == ("the real run",)


def test_the_watch_follows_only_project_namespaces(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, ours: JobRequest
) -> None:
    k8s_backend.apply_job(job=ours)
    k8s_cluster.create_namespace("mallory")
    seen: queue.Queue[ObservedWorkload] = queue.Queue()
    stop = threading.Event()

    def follow() -> None:
        for observed in k8s_backend.watch(stop=stop):
            seen.put(observed)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        assert seen.get(timeout=WAIT_S).phase is Phase.PENDING  # from the list
        forge_job(k8s_cluster, ours, namespace="mallory", name="job-42-r1")
        forge_job(k8s_cluster, ours, namespace=NS, name="job-evil")
        # The stream keeps its order: once our own pod's change arrives, the forged ones
        # (made before it) have been through the watch too.
        k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, "job-42-r1"))
        observed = _until_running(seen)
    finally:
        stop.set()
        thread.join(WAIT_S)
    assert {(o.namespace, o.id) for o in observed} == {(NS, "42")}
    assert Phase.FAILED not in {o.phase for o in observed}


def _until_running(seen: queue.Queue[ObservedWorkload]) -> list[ObservedWorkload]:
    observed: list[Any] = []
    while not observed or observed[-1].phase is not Phase.RUNNING:
        observed.append(seen.get(timeout=WAIT_S))
    return observed
