"""Notebooks on the emulated cluster: start, run, stop keeping the workspace, restart, delete."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.types import NotebookRequest, Phase
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("vision_namespace")]

NS = "ajuste-vision"
POD = "nb-7-0"
CLAIM = "workspace-nb-7-0"


def test_notebook_lifecycle_keeps_workspace_and_url(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, notebook_request: NotebookRequest
) -> None:
    kubelet = k8s_cluster.kubelet
    assert k8s_backend.apply_notebook(notebook=notebook_request).phase is Phase.PENDING
    assert k8s_cluster.get("services", NS, "nb-7") and not k8s_cluster.list("ingresses", NS)
    kubelet.start_init(NS, POD, "pull")
    assert k8s_backend.observe_notebook(ref=notebook_request.ref).phase is Phase.INITIALIZING
    kubelet.run(NS, POD)
    running = k8s_backend.observe_notebook(ref=notebook_request.ref)
    assert (running.phase, running.reason) == (Phase.RUNNING, "ready")
    assert running.url == "https://nb-7.usercontent.ajuste.example/"
    claim_uid = k8s_cluster.get("persistentvolumeclaims", NS, CLAIM)["metadata"]["uid"]  # type: ignore[index]

    stopping = k8s_backend.apply_notebook(notebook=replace(notebook_request, running=False))
    assert stopping.phase is Phase.STOPPING  # its pod terminates
    k8s_cluster.reconcile()  # the kubelet stops it
    stopped = k8s_backend.observe_notebook(ref=notebook_request.ref)
    assert (stopped.phase, stopped.url) == (
        Phase.STOPPED,
        "https://nb-7.usercontent.ajuste.example/",
    )
    assert k8s_cluster.get("pods", NS, POD) is None

    k8s_backend.apply_notebook(notebook=notebook_request)
    kubelet.run(NS, POD)
    again = k8s_backend.observe_notebook(ref=notebook_request.ref)
    assert again.phase is Phase.RUNNING and again.run_uid != running.run_uid
    kept = k8s_cluster.get("persistentvolumeclaims", NS, CLAIM)
    assert kept is not None and kept["metadata"]["uid"] == claim_uid

    k8s_backend.delete_notebook(ref=notebook_request.ref)
    k8s_backend.delete_notebook(ref=notebook_request.ref)
    assert k8s_backend.observe_notebook(ref=notebook_request.ref).phase is Phase.GONE
    k8s_cluster.reconcile()  # the pod stops, then its claim's protection lets it go
    for plural in ("statefulsets", "services", "ingresses", "pods", "persistentvolumeclaims"):
        assert k8s_cluster.list(plural, NS) == []


def test_an_earlier_versions_ingress_goes_when_the_notebook_is_applied(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, notebook_request: NotebookRequest
) -> None:
    """Before the user-content gateway, each notebook had an Ingress on the panel's host with
    ingress-nginx's forward-auth: applying the notebook now deletes it (its own install's)."""
    k8s_backend.apply_notebook(notebook=notebook_request)
    service = k8s_cluster.get("services", NS, "nb-7")
    assert service is not None
    backend = {"service": {"name": "nb-7", "port": {"name": "http"}}}
    rule = {"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
    k8s_cluster.create(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "nb-7", "namespace": NS, "labels": service["metadata"]["labels"]},
            "spec": {"rules": [rule]},
        }
    )
    assert k8s_cluster.get("ingresses", NS, "nb-7") is not None
    k8s_backend.apply_notebook(notebook=notebook_request)
    assert k8s_cluster.get("ingresses", NS, "nb-7") is None


def test_crash_looping_editor_is_failed_with_its_exit_code(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, notebook_request: NotebookRequest
) -> None:
    k8s_backend.apply_notebook(notebook=notebook_request)
    k8s_cluster.kubelet.run(NS, POD)
    pod = k8s_cluster.get("pods", NS, POD)
    assert pod is not None
    main = {
        "name": "main",
        "ready": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": {"terminated": {"exitCode": 127, "reason": "Error"}},
    }
    k8s_cluster.store.patch("pods", NS, POD, {"status": {"containerStatuses": [main]}})
    observed = k8s_backend.observe_notebook(ref=notebook_request.ref)
    assert (observed.phase, observed.exit_code, observed.reason) == (
        Phase.FAILED,
        127,
        "the editor exits (exit code 127)",
    )


def test_unschedulable_notebook_says_why(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, notebook_request: NotebookRequest
) -> None:
    k8s_backend.apply_notebook(notebook=notebook_request)
    message = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    k8s_cluster.kubelet.unschedulable(NS, POD, message)
    observed = k8s_backend.observe_notebook(ref=notebook_request.ref)
    assert (observed.phase, observed.reason) == (Phase.PENDING, message)
    assert [o.phase for o in k8s_backend.observe_all(namespace=NS)] == [Phase.PENDING]
