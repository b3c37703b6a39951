"""What the sweep may do to a run no row names (deploy/kubernetes/orphans.py): stop it (its
controllers and pods go, its workspace claim stays), later delete what is left. Only objects
carrying this install's label are touched: another install's run, and objects made before
install ids (no label), are left whatever happens. And the watch of an install with an id
yields nothing of another install's pods, neither in its relists nor from its events."""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest

from deploy import names
from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.apply import apply
from deploy.manifests import make_workspace_claim
from deploy.types import JobRequest, NotebookRequest, ObservedWorkload, Phase
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("vision_namespace")]
NS = "ajuste-vision"
PROD, STAGING = "a0a0a0a0a0a0a0a0", "b1b1b1b1b1b1b1b1"
WAIT_S = 20.0


@pytest.fixture
def prod(k8s_cluster: EmulatedCluster) -> Iterator[KubernetesBackend]:
    client = k8s_cluster.api_client()
    yield KubernetesBackend(api_client=client, watch_timeout_s=1, install_id=PROD)
    client.close()


@pytest.fixture
def staging(k8s_cluster: EmulatedCluster) -> Iterator[KubernetesBackend]:
    client = k8s_cluster.api_client()
    yield KubernetesBackend(api_client=client, watch_timeout_s=1, install_id=STAGING)
    client.close()


def an_old_claim(prod: KubernetesBackend, job: JobRequest) -> str:
    """A claim of the same run made before install ids (by 0.1.0): no install label."""
    claim = make_workspace_claim(job=replace(job, install=""))
    assert claim is not None
    claim = copy.deepcopy(claim)
    claim["metadata"]["name"] = "job-42-r1-old-ws"
    assert names.INSTALL not in claim["metadata"]["labels"]
    apply(prod.api, claim)
    return str(claim["metadata"]["name"])


def present(cluster: EmulatedCluster, plural: str, name: str) -> bool:
    found = cluster.get(plural, NS, name)
    return found is not None and not found["metadata"].get("deletionTimestamp")


def test_a_stopped_orphan_keeps_its_workspace_then_loses_it(
    k8s_cluster: EmulatedCluster, prod: KubernetesBackend, job_request: JobRequest
) -> None:
    prod.apply_job(job=job_request)
    pod = k8s_cluster.pod_of(NS, "job-42-r1")
    k8s_cluster.kubelet.run(NS, pod)
    old = an_old_claim(prod, job_request)

    assert prod.stop_orphan(ref=job_request.ref) is True  # a workspace is left
    k8s_cluster.reconcile()
    assert not present(k8s_cluster, "jobs", "job-42-r1")
    assert not present(k8s_cluster, "pods", pod)
    assert present(k8s_cluster, "persistentvolumeclaims", "job-42-r1-ws")

    prod.delete_orphan(ref=job_request.ref)
    k8s_cluster.reconcile()
    assert not present(k8s_cluster, "persistentvolumeclaims", "job-42-r1-ws")
    assert present(k8s_cluster, "persistentvolumeclaims", old)  # nothing says whose it is
    assert prod.stop_orphan(ref=job_request.ref) is False  # nothing of this install is left


def test_another_installs_run_is_never_stopped_nor_deleted(
    k8s_cluster: EmulatedCluster,
    prod: KubernetesBackend,
    staging: KubernetesBackend,
    job_request: JobRequest,
) -> None:
    """A copy of production's database (renewed as an install of its own) has no row of
    production's run: to it, the run is no orphan of its own, and nothing of it is touched."""
    prod.apply_job(job=job_request)
    pod = k8s_cluster.pod_of(NS, "job-42-r1")
    k8s_cluster.kubelet.run(NS, pod)
    assert staging.stop_orphan(ref=job_request.ref) is False
    staging.delete_orphan(ref=job_request.ref)
    k8s_cluster.reconcile()
    for plural, name in (
        ("jobs", "job-42-r1"),
        ("pods", pod),
        ("persistentvolumeclaims", "job-42-r1-ws"),
    ):
        assert present(k8s_cluster, plural, name), plural
    assert prod.observe_job(ref=job_request.ref).phase is Phase.RUNNING


def test_an_orphan_notebook_is_stopped_its_workspace_kept(
    k8s_cluster: EmulatedCluster, prod: KubernetesBackend, notebook_request: NotebookRequest
) -> None:
    prod.apply_notebook(notebook=notebook_request)
    k8s_cluster.kubelet.run(NS, "nb-7-0")
    claim = "workspace-nb-7-0"
    assert present(k8s_cluster, "persistentvolumeclaims", claim)
    assert prod.stop_orphan(ref=notebook_request.ref) is True
    k8s_cluster.reconcile()
    for plural in ("statefulsets", "services", "secrets"):
        assert not present(k8s_cluster, plural, "nb-7"), plural
    assert not present(k8s_cluster, "pods", "nb-7-0")
    assert present(k8s_cluster, "persistentvolumeclaims", claim)
    assert prod.observe_notebook(ref=notebook_request.ref).phase is Phase.GONE
    prod.delete_orphan(ref=notebook_request.ref)
    k8s_cluster.reconcile()
    assert not present(k8s_cluster, "persistentvolumeclaims", claim)


def test_an_installs_watch_yields_nothing_of_another_install(
    k8s_cluster: EmulatedCluster,
    prod: KubernetesBackend,
    staging: KubernetesBackend,
    job_request: JobRequest,
) -> None:
    """Production's run exists before the watch starts (its relist) and changes while it
    runs (its events); the staging install's own run, started last, marks the end: whatever
    the watch yields of production's run would have come before it."""
    prod.apply_job(job=job_request)
    stop, seen = threading.Event(), queue.Queue[ObservedWorkload]()

    def follow() -> None:
        # No relist but the first: the events alone must show the staging run. They once did
        # not within 20 s in a full session: the run was made between the sweep's Job and pod
        # lists, observed GONE, and no later pod event said otherwise (test_k8s_list_order).
        for observed in staging.watch(stop=stop, resync_s=300.0):
            seen.put(observed)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, "job-42-r1"))
        ours = replace(job_request, id="43", volumes=())
        staging.apply_job(job=ours)
        k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, "job-43-r1"))
        yielded = []
        while not (yielded and yielded[-1].id == "43" and yielded[-1].phase is Phase.RUNNING):
            try:
                yielded.append(seen.get(timeout=WAIT_S))
            except queue.Empty:
                raise AssertionError(f"the staging run never showed running: {yielded}") from None
    finally:
        stop.set()
        thread.join(WAIT_S)
    assert {o.id for o in yielded} == {"43"}
