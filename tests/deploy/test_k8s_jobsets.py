"""The Kubernetes backend runs a job of several nodes as its JobSet (issue 29), on the emulator
playing JobSet v0.9.1: applied instead of the Job, observed from the JobSet (a node failing
restarts the group and is not final; only the JobSet's own failure is), billed per pod,
stopped by suspending the JobSet, its log read from node 0, deleted with the run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deploy.kubernetes.backend import KubernetesBackend
from deploy.manifests.jobset import MAX_GROUP_RESTARTS
from deploy.types import JobRequest, Phase
from tests.deploy.conftest import make_job_request
from tests.deploy.kueue_objects import cluster_queue, flavor, local_queue, need_schemas
from tests.fixtures.k8s_emulator import EmulatedCluster, crds

pytestmark = pytest.mark.k8s

NS = "ajuste-vision"
NAME = "job-42-r1"
INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def cluster(k8s_cluster: EmulatedCluster, vision_namespace: str) -> EmulatedCluster:
    need_schemas(crds.JOBSET)
    k8s_cluster.install_jobset()
    return k8s_cluster


@pytest.fixture
def two_nodes() -> JobRequest:
    return make_job_request(nodes=2, volumes=())


def node_pods(cluster: EmulatedCluster) -> list[str]:
    found = [
        p
        for p in cluster.pods_of(NS, f"{NAME}-node-0")
        if not p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]
    found.sort(key=lambda p: int(p["metadata"]["annotations"][INDEX]))
    return [p["metadata"]["name"] for p in found]


def run_all(cluster: EmulatedCluster) -> list[str]:
    pods = node_pods(cluster)
    assert len(pods) == 2
    for pod in pods:
        cluster.kubelet.run(NS, pod)
    return pods


def test_two_nodes_apply_a_jobset_not_a_job_and_run_once_every_node_runs(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend, two_nodes: JobRequest
) -> None:
    observed = k8s_backend.apply_job(job=two_nodes)
    assert cluster.get("jobsets", NS, NAME) is not None
    assert cluster.get("jobs", NS, NAME) is None  # no Job of one node beside it
    assert cluster.get("persistentvolumeclaims", NS, "ws-42-r1") is None
    assert observed.phase is Phase.PENDING
    first, second = node_pods(cluster)
    cluster.kubelet.run(NS, first)
    waiting = k8s_backend.observe_job(ref=two_nodes.ref)
    assert waiting.phase is Phase.PENDING  # one node of two runs: the group does not yet
    cluster.kubelet.run(NS, second)
    running = k8s_backend.observe_job(ref=two_nodes.ref)
    assert (running.phase, running.reason) == (Phase.RUNNING, "running on 2 nodes")
    assert running.replica_runs is not None and len(running.replica_runs) == 2
    again = k8s_backend.apply_job(job=two_nodes)  # a second apply adopts it, makes nothing
    assert again.phase is Phase.RUNNING
    for pod in (first, second):
        cluster.kubelet.finish(NS, pod)
    done = k8s_backend.observe_job(ref=two_nodes.ref)
    assert (done.phase, done.exit_code) == (Phase.SUCCEEDED, 0)
    assert {r.uid for r in done.replica_runs or ()} == {
        p["metadata"]["uid"] for p in cluster.pods_of(NS, f"{NAME}-node-0")
    }
    assert all(r.finished_at is not None for r in done.replica_runs or ())


def test_a_failed_node_restarts_the_group_and_is_not_final(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend, two_nodes: JobRequest
) -> None:
    k8s_backend.apply_job(job=two_nodes)
    first = run_all(cluster)
    cluster.kubelet.finish(NS, first[1], exit_code=1, message="NCCL timeout")
    restarting = k8s_backend.observe_job(ref=two_nodes.ref)
    assert restarting.phase is Phase.RUNNING
    assert "restart 1 of 2" in restarting.reason
    second = run_all(cluster)
    assert cluster.get("jobsets", NS, NAME)["status"]["restarts"] == 1
    assert not set(second) & set(first)  # both nodes anew
    observed = k8s_backend.observe_job(ref=two_nodes.ref)
    assert observed.phase is Phase.RUNNING and "group restart 1" in observed.reason
    for pod in second:
        cluster.kubelet.finish(NS, pod)
    assert k8s_backend.observe_job(ref=two_nodes.ref).phase is Phase.SUCCEEDED


def test_the_run_fails_only_when_the_restarts_are_spent(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend, two_nodes: JobRequest
) -> None:
    k8s_backend.apply_job(job=two_nodes)
    for attempt in range(MAX_GROUP_RESTARTS + 1):
        pods = run_all(cluster)
        observed = k8s_backend.observe_job(ref=two_nodes.ref)
        assert observed.phase is Phase.RUNNING, attempt
        cluster.kubelet.finish(NS, pods[0], exit_code=3, message="CUDA error")
    failed = k8s_backend.observe_job(ref=two_nodes.ref)
    assert failed.phase is Phase.FAILED
    assert failed.reason == "node 0: exit code 3: CUDA error (after 2 group restarts)"
    assert failed.exit_code == 3


def test_a_stop_suspends_the_jobset_and_ends_stopped(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend, two_nodes: JobRequest
) -> None:
    k8s_backend.apply_job(job=two_nodes)
    run_all(cluster)
    k8s_backend.stop_job(job=two_nodes)
    jobset = cluster.get("jobsets", NS, NAME)
    assert jobset["spec"]["suspend"] is True
    assert "ajuste.io/stop-requested" in jobset["metadata"]["annotations"]
    assert cluster.get("jobsets", NS, NAME)["status"].get("restarts", 0) == 0  # no restart
    observed = k8s_backend.observe_job(ref=two_nodes.ref)
    assert (observed.phase, observed.reason) == (Phase.STOPPED, "stopped at the user's request")
    assert node_pods(cluster) == []  # JobSet suspended its child: the pods went
    k8s_backend.stop_job(job=two_nodes)  # a second stop changes nothing
    assert cluster.get("jobsets", NS, NAME)["status"].get("restarts", 0) == 0


def test_logs_come_from_node_zero_and_delete_removes_the_jobset(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend, two_nodes: JobRequest
) -> None:
    k8s_backend.apply_job(job=two_nodes)
    zero, one = run_all(cluster)
    cluster.kubelet.log(NS, one, "rank 1 speaks")
    cluster.kubelet.log(NS, zero, "rank 0 speaks")
    chunk = k8s_backend.read_logs(ref=two_nodes.ref, cursor=None)
    assert [line.endswith("rank 0 speaks") for line in chunk.lines] == [True]
    k8s_backend.delete_job(ref=two_nodes.ref)
    assert cluster.get("jobs", NS, f"{NAME}-node-0") is None  # the child Job followed
    assert cluster.get("jobsets", NS, NAME) is None
    assert k8s_backend.observe_job(ref=two_nodes.ref).phase is Phase.GONE


def test_kueue_holds_the_whole_gang_queued_with_its_reason(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    need_schemas(crds.KUEUE)
    cluster.install_kueue()
    cluster.create(flavor())
    cluster.create(cluster_queue("vision", 3, cohort=None))
    cluster.create(local_queue(NS, "vision"))
    job = make_job_request(units=2, nodes=2, volumes=(), queue_name="gpu")
    job = replace(job, flavor=replace(job.flavor, vcpu_per_unit=4, memory_gib_per_unit=16))
    observed = k8s_backend.apply_job(job=job)
    assert observed.phase is Phase.QUEUED
    assert "Kueue queue gpu" in observed.reason
    assert node_pods(cluster) == []


def test_an_orphan_jobset_of_this_install_goes_and_another_installs_stays(
    cluster: EmulatedCluster, two_nodes: JobRequest
) -> None:
    client = cluster.api_client()
    mine = KubernetesBackend(api_client=client, install_id=two_nodes.install)
    other = KubernetesBackend(api_client=client, install_id="other-install")
    mine.apply_job(job=two_nodes)
    theirs = replace(two_nodes, id="77", install="other-install")
    other.apply_job(job=theirs)
    run_all(cluster)
    assert mine.stop_orphan(ref=two_nodes.ref) is False  # no workspace claim left behind
    assert cluster.get("jobsets", NS, NAME) is None
    assert cluster.get("jobs", NS, f"{NAME}-node-0") is None
    assert mine.observe_job(ref=two_nodes.ref).phase is Phase.GONE
    mine.stop_orphan(ref=theirs.ref)  # another install's run: never touched
    assert cluster.get("jobsets", NS, "job-77-r1") is not None
    client.close()


def test_a_stop_of_a_gang_kueue_admitted_deactivates_its_workload(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    """Kueue starts again what it admitted when only `suspend` is set: the stop also sets
    the Workload inactive, so Kueue evicts it and it stays stopped."""
    need_schemas(crds.KUEUE)
    kueue = cluster.install_kueue()
    cluster.create(flavor())
    cluster.create(cluster_queue("vision", 4, cohort=None))
    cluster.create(local_queue(NS, "vision"))
    job = make_job_request(units=2, nodes=2, volumes=(), queue_name="gpu")
    job = replace(job, flavor=replace(job.flavor, vcpu_per_unit=4, memory_gib_per_unit=16))
    k8s_backend.apply_job(job=job)
    run_all(cluster)
    assert k8s_backend.observe_job(ref=job.ref).phase is Phase.RUNNING
    k8s_backend.stop_job(job=job)
    workload = kueue.workload("JobSet", NS, NAME)
    assert workload is not None and workload["spec"]["active"] is False
    observed = k8s_backend.observe_job(ref=job.ref)
    assert (observed.phase, observed.reason) == (Phase.STOPPED, "stopped at the user's request")
    assert node_pods(cluster) == []
    assert cluster.get("jobsets", NS, NAME)["spec"]["suspend"] is True
