"""A JobSet's group restart deletes the healthy node's pod (issue 29): the backend's
observation still reports that pod of the earlier attempt, so billing ends it at its own end.
While it terminates, its deadline (`ends_by`, the deletionTimestamp); once gone, the watcher's
DELETED event gives its container's finish. A pod claiming another JobSet is not taken."""

from __future__ import annotations

import copy

import pytest

from deploy.kubernetes.backend import KubernetesBackend
from deploy.kubernetes.listing import MANAGED
from deploy.kubernetes.pods import parse_time
from deploy.types import JobRequest
from tests.deploy.test_k8s_jobsets import NS, cluster, run_all, two_nodes
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = pytest.mark.k8s
__all__ = ["cluster", "two_nodes"]  # the fixtures, shared with test_k8s_jobsets


def test_the_terminating_pod_of_the_earlier_attempt_reports_its_deletion_deadline(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend, two_nodes: JobRequest
) -> None:
    cluster.kubelet.ignore_sigterm = True
    k8s_backend.apply_job(job=two_nodes)
    node0, node1 = run_all(cluster)
    cluster.kubelet.finish(NS, node1, exit_code=1, message="NCCL timeout")
    pod = cluster.get("pods", NS, node0)
    assert pod is not None and pod["status"]["phase"] == "Running"
    deadline = parse_time(pod["metadata"]["deletionTimestamp"])
    observed = k8s_backend.observe_job(ref=two_nodes.ref)
    [healthy] = [r for r in observed.replica_runs or () if r.uid == pod["metadata"]["uid"]]
    assert healthy.finished_at is None and healthy.ends_by == deadline is not None
    assert "restart 1 of 2" in observed.reason
    cluster.advance(int(pod["metadata"]["deletionGracePeriodSeconds"]))  # killed, gone
    gone = k8s_backend.observe_job(ref=two_nodes.ref)
    assert pod["metadata"]["uid"] not in {r.uid for r in gone.replica_runs or ()}


def test_the_deleted_event_of_the_earlier_attempt_gives_its_end_and_only_for_its_jobset(
    cluster: EmulatedCluster, k8s_backend: KubernetesBackend, two_nodes: JobRequest
) -> None:
    k8s_backend.apply_job(job=two_nodes)
    node0, node1 = run_all(cluster)
    uid = cluster.get("pods", NS, node0)["metadata"]["uid"]
    version = k8s_backend.api.list("Pod", NS, label_selector=MANAGED)[1]
    cluster.kubelet.finish(NS, node1, exit_code=1, message="NCCL timeout")
    assert cluster.get("pods", NS, node0) is None  # SIGTERM: ended and gone at once
    events = k8s_backend.api.watch(
        "Pod", NS, label_selector=MANAGED, resource_version=version, timeout_s=1
    )
    [deleted] = [
        e["object"]
        for e in events
        if e.get("type") == "DELETED" and e["object"]["metadata"]["uid"] == uid
    ]
    observed = k8s_backend._observe_after_event(two_nodes.ref, deleted)
    [healthy] = [r for r in observed.replica_runs or () if r.uid == uid]
    [main] = [c for c in deleted["status"]["containerStatuses"] if c["name"] == "main"]
    assert healthy.finished_at == parse_time(main["state"]["terminated"]["finishedAt"])
    assert healthy.exit_code == 143
    forged = copy.deepcopy(deleted)
    forged["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-uid"] = "another-jobset"
    other = k8s_backend._observe_after_event(two_nodes.ref, forged)
    assert uid not in {r.uid for r in other.replica_runs or ()}
