"""JobSet v0.9.1 on the emulator, through the official client's CustomObjectsApi: the JobSet
validated against its CRD and JobSet's webhook, and its controller played on the emulator's Job
controller and kubelet: child Jobs `<jobset>-<replicatedJob>-<index>`, Indexed pods with stable
hostnames under a headless Service, a failed pod restarting the whole group up to
`failurePolicy.maxRestarts`, `suspend` for Kueue, which admits a JobSet as one Workload (gang).
The panel's multi-node jobs (issue 21) are tested against this."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from tests.deploy.kueue_objects import (
    GPU,
    cluster_queue,
    conditions,
    flavor,
    jobset,
    local_queue,
    need_schemas,
    queued_job,
)
from tests.fixtures.k8s_emulator import EmulatedCluster, crds

pytestmark = pytest.mark.k8s

Obj = dict[str, Any]
NS = "ajuste-vision"
GROUP, VERSION = "jobset.x-k8s.io", "v1alpha2"


@pytest.fixture
def cluster(k8s_cluster: EmulatedCluster) -> EmulatedCluster:
    k8s_cluster.install_jobset()
    k8s_cluster.create_namespace(NS)
    return k8s_cluster


@pytest.fixture
def api(cluster: EmulatedCluster) -> Iterator[CustomObjectsApi]:
    client = cluster.api_client()
    yield CustomObjectsApi(client)
    client.close()


def submit(api: CustomObjectsApi, body: Obj) -> Obj:
    return api.create_namespaced_custom_object(GROUP, VERSION, NS, "jobsets", body)


def refusal(call: Callable[[], object]) -> tuple[int, Obj]:
    with pytest.raises(ApiException) as raised:
        call()
    return raised.value.status, json.loads(raised.value.body)


def child_pods(cluster: EmulatedCluster, job: str) -> list[Obj]:
    pods = [p for p in cluster.pods_of(NS, job) if not p["metadata"].get("deletionTimestamp")]
    return sorted(pods, key=lambda p: int(p["metadata"]["labels"][INDEX]))


INDEX = "batch.kubernetes.io/job-completion-index"


def finish_all(cluster: EmulatedCluster, job: str, exit_code: int = 0) -> None:
    for pod in child_pods(cluster, job):
        cluster.kubelet.run(NS, pod["metadata"]["name"])
        cluster.kubelet.finish(NS, pod["metadata"]["name"], exit_code=exit_code)


def test_a_jobset_makes_its_indexed_child_jobs_and_headless_service(
    cluster: EmulatedCluster, api: CustomObjectsApi
) -> None:
    created = submit(api, jobset(NS, "ft-9", queue=None))
    assert created["spec"]["network"] == {
        "enableDNSHostnames": True,
        "publishNotReadyAddresses": True,
    }
    assert created["spec"]["successPolicy"] == {"operator": "All"}
    job = cluster.get("jobs", NS, "ft-9-node-0")
    assert job is not None and job["spec"]["completionMode"] == "Indexed"
    labels = job["metadata"]["labels"]
    assert {k: labels[k] for k in labels if k.startswith("jobset.sigs.k8s.io/")} | {
        "jobset.sigs.k8s.io/job-key": "-"
    } == {
        "jobset.sigs.k8s.io/jobset-name": "ft-9",
        "jobset.sigs.k8s.io/jobset-uid": created["metadata"]["uid"],
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
        "jobset.sigs.k8s.io/global-replicas": "1",
        "jobset.sigs.k8s.io/job-index": "0",
        "jobset.sigs.k8s.io/job-key": "-",
        "jobset.sigs.k8s.io/job-global-index": "0",
        "jobset.sigs.k8s.io/group-name": "default",
        "jobset.sigs.k8s.io/group-replicas": "1",
        "jobset.sigs.k8s.io/job-group-index": "0",
    }
    assert len(labels["jobset.sigs.k8s.io/job-key"]) == 40  # sha1 of "<ns>/<job>"
    service = cluster.get("services", NS, "ft-9")
    assert service is not None and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "ft-9"}
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    pods = child_pods(cluster, "ft-9-node-0")
    assert [(p["spec"]["hostname"], p["spec"]["subdomain"]) for p in pods] == [
        ("ft-9-node-0-0", "ft-9"),
        ("ft-9-node-0-1", "ft-9"),
    ]
    assert [p["metadata"]["annotations"][INDEX] for p in pods] == ["0", "1"]
    env = pods[1]["spec"]["containers"][0]["env"]
    assert {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}},
    } in env
    assert pods[0]["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "ft-9"


def test_every_index_done_completes_the_jobset(
    cluster: EmulatedCluster, api: CustomObjectsApi
) -> None:
    submit(api, jobset(NS, "ft-9", queue=None))
    pods = child_pods(cluster, "ft-9-node-0")
    cluster.kubelet.run(NS, pods[0]["metadata"]["name"])
    cluster.kubelet.finish(NS, pods[0]["metadata"]["name"])
    job = cluster.get("jobs", NS, "ft-9-node-0")
    assert job["status"]["completedIndexes"] == "0" and job["status"]["active"] == 1
    assert "Completed" not in conditions(cluster.get("jobsets", NS, "ft-9"))
    finish_all(cluster, "ft-9-node-0")
    assert cluster.get("jobs", NS, "ft-9-node-0")["status"]["completedIndexes"] == "0-1"
    stored = cluster.get("jobsets", NS, "ft-9")
    assert conditions(stored)["Completed"] == (
        "True",
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    assert stored["status"]["terminalState"] == "Completed"
    assert stored["status"]["replicatedJobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]


def test_a_failed_rank_restarts_the_whole_group_until_max_restarts(
    cluster: EmulatedCluster, api: CustomObjectsApi
) -> None:
    submit(api, jobset(NS, "ft-9", queue=None, failurePolicy={"maxRestarts": 1}))
    first = [p["metadata"]["uid"] for p in child_pods(cluster, "ft-9-node-0")]
    pods = child_pods(cluster, "ft-9-node-0")
    for pod in pods:
        cluster.kubelet.run(NS, pod["metadata"]["name"])
    cluster.kubelet.finish(NS, pods[1]["metadata"]["name"], exit_code=1)  # rank 1 crashes
    stored = cluster.get("jobsets", NS, "ft-9")
    assert (stored["status"]["restarts"], stored["status"]["restartsCountTowardsMax"]) == (1, 1)
    job = cluster.get("jobs", NS, "ft-9-node-0")
    assert job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
    second = child_pods(cluster, "ft-9-node-0")
    assert len(second) == 2 and not {p["metadata"]["uid"] for p in second} & set(first)
    events = [
        e for e in cluster.list("events", NS) if e["reason"] == "RestartJobSetFailurePolicyAction"
    ]
    assert [e["message"] for e in events] == [
        "applying RestartJobSet failure policy action (first failed job: ft-9-node-0)"
    ]
    cluster.kubelet.run(NS, second[0]["metadata"]["name"])
    cluster.kubelet.finish(NS, second[0]["metadata"]["name"], exit_code=1)  # again: no restart left
    stored = cluster.get("jobsets", NS, "ft-9")
    assert conditions(stored)["Failed"] == (
        "True",
        "ReachedMaxRestarts",
        "jobset failed due to reaching max number of restarts (first failed job: ft-9-node-0)",
    )
    assert stored["status"]["terminalState"] == "Failed"
    live = [p for p in child_pods(cluster, "ft-9-node-0") if p["status"]["phase"] != "Failed"]
    assert live == []  # the other rank was stopped


def test_without_a_failure_policy_a_failed_job_fails_the_jobset(
    cluster: EmulatedCluster, api: CustomObjectsApi
) -> None:
    submit(api, jobset(NS, "ft-9", queue=None))
    pod = child_pods(cluster, "ft-9-node-0")[0]
    cluster.kubelet.run(NS, pod["metadata"]["name"])
    cluster.kubelet.finish(NS, pod["metadata"]["name"], exit_code=2)
    assert conditions(cluster.get("jobsets", NS, "ft-9"))["Failed"] == (
        "True",
        "FailedJobs",
        "jobset failed due to one or more job failures (first failed job: ft-9-node-0)",
    )


def test_a_suspended_jobset_runs_nothing_until_resumed(
    cluster: EmulatedCluster, api: CustomObjectsApi
) -> None:
    submit(api, jobset(NS, "ft-9", queue=None, suspend=True))
    assert cluster.get("jobs", NS, "ft-9-node-0")["spec"]["suspend"] is True
    assert child_pods(cluster, "ft-9-node-0") == []
    assert conditions(cluster.get("jobsets", NS, "ft-9"))["Suspended"] == (
        "True",
        "SuspendedJobs",
        "jobset is suspended",
    )
    api.patch_namespaced_custom_object(
        GROUP, VERSION, NS, "jobsets", "ft-9", {"spec": {"suspend": False}}
    )
    cluster.reconcile()
    assert len(child_pods(cluster, "ft-9-node-0")) == 2
    assert conditions(cluster.get("jobsets", NS, "ft-9"))["Suspended"] == (
        "False",
        "ResumeJobs",
        "jobset is resumed",
    )


def test_a_jobset_is_checked_against_its_schema_and_its_webhook(
    cluster: EmulatedCluster, api: CustomObjectsApi
) -> None:
    need_schemas(crds.JOBSET)
    body = jobset(NS, "ft-9", queue=None)
    body["spec"]["replicatedJobs"][0]["replicas"] = "two"
    code, status = refusal(lambda: submit(api, body))
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "spec.replicatedJobs[0].replicas"
    body = jobset(NS, "ft-9", queue=None)
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["gpus"] = 2
    code, status = refusal(lambda: submit(api, body))
    assert (code, status["message"]) == (
        400,
        "strict decoding error: unknown field "
        '"spec.replicatedJobs[0].template.spec.template.spec.gpus"',
    )
    name = "fine-tune-of-a-seventy-billion-parameter-model-on-h100"
    code, status = refusal(lambda: submit(api, jobset(NS, name, queue=None)))
    assert (code, status["reason"]) == (403, "Forbidden")
    assert status["message"] == (
        'admission webhook "vjobset.kb.io" denied the request: spec.replicatedJobs[0].name: '
        f'Invalid value: "{name}-node-0": JobSet name is too long, pod names generated for this '
        "JobSet will exceed 63 characters"
    )
    assert cluster.list("jobsets") == [] and cluster.list("jobs") == []


def test_kueue_admits_a_jobset_as_one_workload_all_or_nothing(
    cluster: EmulatedCluster,
) -> None:
    kueue = cluster.install_kueue()
    cluster.create(flavor())
    cluster.create(cluster_queue("vision", 4, cohort=None))
    cluster.create(local_queue(NS, "vision"))
    cluster.create(queued_job(NS, "single", gpus=1))
    cluster.create(jobset(NS, "ft-9", nodes=2, gpus=2))  # 2 x 2 GPUs, 3 free
    found = kueue.workload("JobSet", NS, "ft-9")
    assert found is not None and found["metadata"]["name"].startswith("jobset-ft-9-")
    assert [(p["name"], p["count"]) for p in found["spec"]["podSets"]] == [("node", 2)]
    assert conditions(found)["QuotaReserved"][2] == (
        "couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in "
        "flavor h100, 1 more needed"
    )
    assert cluster.get("jobsets", NS, "ft-9")["spec"]["suspend"] is True
    assert child_pods(cluster, "ft-9-node-0") == []  # no rank runs before the gang fits
    single = cluster.pod_of(NS, "single")
    cluster.kubelet.run(NS, single)
    cluster.kubelet.finish(NS, single)
    assert conditions(kueue.workload("JobSet", NS, "ft-9"))["Admitted"][0] == "True"
    pods = child_pods(cluster, "ft-9-node-0")
    assert len(pods) == 2
    assert {p["spec"]["nodeSelector"]["nvidia.com/gpu.product"] for p in pods} == {
        "NVIDIA-H100-80GB-HBM3"
    }
    assert kueue.usage("vision")[("h100", GPU)] == 4


def test_an_evicted_jobset_stops_every_rank_and_is_requeued_as_one(
    cluster: EmulatedCluster,
) -> None:
    kueue = cluster.install_kueue()
    cluster.create(flavor())
    cluster.create(cluster_queue("vision", 4, cohort=None))
    cluster.create(local_queue(NS, "vision"))
    cluster.create(jobset(NS, "ft-9", nodes=2, gpus=2))
    pods = child_pods(cluster, "ft-9-node-0")
    for pod in pods:
        cluster.kubelet.run(NS, pod["metadata"]["name"])
    name = kueue.workload_name("JobSet", NS, "ft-9")
    kueue.automatic = False  # to see it stopped before it is admitted again
    kueue.evict(NS, name, message="preempted: project vision reclaimed its quota")
    assert cluster.get("jobsets", NS, "ft-9")["spec"]["suspend"] is True
    assert cluster.get("jobs", NS, "ft-9-node-0")["spec"]["suspend"] is True
    assert child_pods(cluster, "ft-9-node-0") == []  # both ranks stopped together
    found = conditions(cluster.get("workloads", NS, name))
    assert found["Requeued"] == (
        "True",
        "Preempted",
        "preempted: project vision reclaimed its quota",
    )
    assert found["QuotaReserved"] == (
        "False",
        "Pending",
        "preempted: project vision reclaimed its quota",
    )
    kueue.automatic = True
    cluster.reconcile()
    found = conditions(cluster.get("workloads", NS, name))
    assert found["QuotaReserved"][:2] == ("True", "QuotaReserved")  # admitted again: room
    again = child_pods(cluster, "ft-9-node-0")
    assert len(again) == 2 and not {p["metadata"]["uid"] for p in again} & {
        p["metadata"]["uid"] for p in pods
    }
