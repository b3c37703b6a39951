"""A job of several nodes as a JobSet (issue 29), on the emulator playing JobSet v0.9.1 with
the CRDs of ../shared/crds: accepted by its schema and webhook, one Indexed child Job of
`nodes` pods with stable hostnames under the headless Service, torchrun's rendezvous filled in
(pod 0's hostname is the endpoint), node 0 alone pushing, a failed pod restarting the group,
and Kueue admitting the whole gang at once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from kubernetes.client import CustomObjectsApi

from deploy.manifests.jobs import make_job
from deploy.manifests.jobset import MAX_GROUP_RESTARTS, RDZV_PORT, make_jobset
from tests.deploy.conftest import H100, make_job_request
from tests.deploy.kueue_objects import cluster_queue, conditions, flavor, local_queue, need_schemas
from tests.fixtures.k8s_emulator import EmulatedCluster, crds

pytestmark = pytest.mark.k8s

Obj = dict[str, Any]
NS = "ajuste-vision"
INDEX = "batch.kubernetes.io/job-completion-index"
# Smaller nodes than an H100 machine's, so that a gang fits the test's ClusterQueue.
SMALL = replace(H100, vcpu_per_unit=4, memory_gib_per_unit=16)


@pytest.fixture
def cluster(k8s_cluster: EmulatedCluster) -> EmulatedCluster:
    need_schemas(crds.JOBSET)
    k8s_cluster.install_jobset()
    k8s_cluster.create_namespace(NS)
    return k8s_cluster


@pytest.fixture
def api(cluster: EmulatedCluster) -> Iterator[CustomObjectsApi]:
    client = cluster.api_client()
    yield CustomObjectsApi(client)
    client.close()


def submit(api: CustomObjectsApi, body: Obj) -> Obj:
    return api.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NS, "jobsets", body)


def pods(cluster: EmulatedCluster, name: str) -> list[Obj]:
    found = [
        p
        for p in cluster.pods_of(NS, f"{name}-node-0")
        if not p["metadata"].get("deletionTimestamp")
    ]
    return sorted(found, key=lambda p: int(p["metadata"]["labels"][INDEX]))


def env_of(pod: Obj, container: str = "main") -> dict[str, Any]:
    found = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in found.get("env") or []}


def test_two_nodes_make_one_indexed_job_with_torchruns_rendezvous(
    cluster: EmulatedCluster, api: CustomObjectsApi
) -> None:
    job = make_job_request(units=2, nodes=2)
    body = make_jobset(job=job)
    name = body["metadata"]["name"]
    created = submit(api, body)
    assert created["spec"]["failurePolicy"]["maxRestarts"] == MAX_GROUP_RESTARTS
    assert "suspend" not in created["spec"] or created["spec"]["suspend"] is False
    child = cluster.get("jobs", NS, f"{name}-node-0")
    assert child is not None
    assert (child["spec"]["completionMode"], child["spec"]["completions"]) == ("Indexed", 2)
    assert cluster.get("services", NS, name)["spec"]["clusterIP"] == "None"
    started = pods(cluster, name)
    hosts = [(p["spec"]["hostname"], p["spec"]["subdomain"]) for p in started]
    assert hosts == [(f"{name}-node-0-0", name), (f"{name}-node-0-1", name)]
    env = env_of(started[1])
    assert env["PET_RDZV_ENDPOINT"] == f"{hosts[0][0]}.{hosts[0][1]}:{RDZV_PORT}"
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_RDZV_BACKEND"]) == (
        "2",
        "2",
        "c10d",
    )
    assert (env["PET_RDZV_ID"], env["PET_MAX_RESTARTS"]) == ("42-1", "0")
    assert env["PET_NODE_RANK"] == {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}}
    assert env["EPOCHS"] == "3"  # the user's own environment is kept
    resources = started[0]["spec"]["containers"][0]["resources"]["limits"]
    assert resources["nvidia.com/gpu"] == "2"  # gpu per node, not in all


def test_node_zero_alone_pushes_and_no_claim_spans_machines(
    cluster: EmulatedCluster, api: CustomObjectsApi
) -> None:
    body = make_jobset(job=make_job_request(nodes=3))
    submit(api, body)
    pod = pods(cluster, body["metadata"]["name"])[2]["spec"]
    workspace = next(v for v in pod["volumes"] if v["name"] == "workspace")
    assert "persistentVolumeClaim" not in workspace and workspace["emptyDir"]
    push = next(c for c in pod["initContainers"] if c["name"] == "push")
    assert push["command"][-2:] == ["--only-index", "0"]
    pull = next(c for c in pod["initContainers"] if c["name"] == "pull")
    assert "--only-index" not in pull["command"]  # every node reads the data
    # One node stays today's Job, with its claim.
    one = make_job(job=make_job_request())["spec"]["template"]["spec"]["volumes"][0]
    assert "persistentVolumeClaim" in one


def test_a_failed_node_restarts_the_group_then_the_jobset_completes(
    cluster: EmulatedCluster, api: CustomObjectsApi
) -> None:
    body = make_jobset(job=make_job_request(nodes=2, volumes=()))
    name = body["metadata"]["name"]
    submit(api, body)
    first = pods(cluster, name)
    for pod in first:
        cluster.kubelet.run(NS, pod["metadata"]["name"])
    cluster.kubelet.finish(NS, first[1]["metadata"]["name"], exit_code=1)  # node 1 crashes
    assert cluster.get("jobsets", NS, name)["status"]["restarts"] == 1
    second = pods(cluster, name)
    assert len(second) == 2
    assert not {p["metadata"]["uid"] for p in second} & {p["metadata"]["uid"] for p in first}
    for pod in second:
        cluster.kubelet.run(NS, pod["metadata"]["name"])
        cluster.kubelet.finish(NS, pod["metadata"]["name"])
    assert conditions(cluster.get("jobsets", NS, name))["Completed"][0] == "True"


def test_kueue_admits_the_jobset_as_one_gang(cluster: EmulatedCluster) -> None:
    need_schemas(crds.KUEUE)
    kueue = cluster.install_kueue()
    cluster.create(flavor())
    cluster.create(cluster_queue("vision", 3, cohort=None))
    cluster.create(local_queue(NS, "vision"))
    job = make_job_request(flavor=SMALL, units=2, nodes=2, volumes=(), queue_name="gpu")
    body = make_jobset(job=job)
    name = body["metadata"]["name"]
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    assert body["spec"]["suspend"] is True
    cluster.create(body)  # 2 x 2 GPUs; the queue has 3
    workload = kueue.workload("JobSet", NS, name)
    assert workload is not None
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [("node", 2)]
    assert "Admitted" not in conditions(workload) or conditions(workload)["Admitted"][0] != "True"
    assert pods(cluster, name) == []  # no node runs before the whole gang fits
    cluster.create(cluster_queue("vision-4", 4, cohort=None))
    cluster.create(local_queue(NS, "vision-4", name="gpu4"))
    four = make_jobset(job=replace(job, id="43", queue_name="gpu4"))
    cluster.create(four)
    assert len(pods(cluster, four["metadata"]["name"])) == 2
