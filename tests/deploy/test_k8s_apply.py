"""Idempotent apply and delete: 409 adopt or patch, 404 done, 5xx retried, foreign refused."""

from __future__ import annotations

import base64
import copy
from dataclasses import replace
from typing import Any

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.apply import apply, delete, spec_hash
from deploy.manifests import make_job, make_notebook_service
from deploy.types import (
    ConflictError,
    JobRequest,
    NotebookRequest,
    ProjectRequest,
    TransientError,
)
from storage.datastore import DatastoreConfig
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("vision_namespace")]


def methods(cluster: EmulatedCluster) -> list[tuple[str, str]]:
    return [(str(r.method.value), r.url.path) for r in cluster.requests()]


def test_second_apply_reads_and_adopts_without_writing(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    manifest = make_job(job=job_request)
    first = apply(k8s_backend.api, manifest)
    second = apply(k8s_backend.api, manifest)
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert second["metadata"]["annotations"]["ajuste.io/spec-hash"] == spec_hash(manifest)
    path = "/apis/batch/v1/namespaces/ajuste-vision/jobs"
    assert methods(k8s_cluster) == [
        ("POST", path),
        ("POST", path),  # 409 AlreadyExists
        ("GET", f"{path}/job-42-r1"),
    ]


def test_changed_request_patches_what_may_change(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, notebook_request: NotebookRequest
) -> None:
    service = make_notebook_service(notebook=notebook_request)
    apply(k8s_backend.api, service)
    changed = copy.deepcopy(service)
    changed["spec"]["ports"][0]["port"] = 8080
    apply(k8s_backend.api, changed)
    stored = k8s_cluster.get("services", "ajuste-vision", "nb-7")
    assert stored is not None and stored["spec"]["ports"][0]["port"] == 8080
    assert methods(k8s_cluster)[-1] == ("PATCH", "/api/v1/namespaces/ajuste-vision/services/nb-7")


def test_a_job_never_changes_once_created(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    apply(k8s_backend.api, make_job(job=job_request))
    changed = make_job(job=JobRequest(**{**job_request.__dict__, "image": "other:2"}))
    kept = apply(k8s_backend.api, changed)
    assert (
        kept["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/train:1.0"
    )
    assert "PATCH" not in {method for method, _ in methods(k8s_cluster)}


def test_an_object_that_is_not_ours_is_never_adopted(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, notebook_request: NotebookRequest
) -> None:
    service = make_notebook_service(notebook=notebook_request)
    foreign: dict[str, Any] = copy.deepcopy(service)
    foreign["metadata"]["labels"] = {"app": "someone-else"}
    k8s_backend.api.create(foreign)
    with pytest.raises(ConflictError, match=r"Service ajuste-vision/nb-7 .* not managed by Ajuste"):
        apply(k8s_backend.api, service)
    stored = k8s_cluster.get("services", "ajuste-vision", "nb-7")
    assert stored is not None and stored["metadata"]["labels"] == {"app": "someone-else"}


def test_an_object_being_deleted_asks_for_a_retry(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, notebook_request: NotebookRequest
) -> None:
    service = make_notebook_service(notebook=notebook_request)
    apply(k8s_backend.api, service)
    terminating = {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}
    k8s_cluster.store.patch("services", "ajuste-vision", "nb-7", terminating)
    with pytest.raises(TransientError, match="still being deleted"):
        apply(k8s_backend.api, {**service, "spec": {**service["spec"], "type": "NodePort"}})


def test_404_on_delete_means_done(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    assert delete(k8s_backend.api, "Job", "ajuste-vision", "job-42-r1") is False
    k8s_backend.apply_job(job=job_request)
    k8s_backend.delete_job(ref=job_request.ref)
    k8s_backend.delete_job(ref=job_request.ref)
    assert k8s_cluster.list("jobs") == []


def test_a_500_is_retried_and_then_reported_as_transient(
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    job_request: JobRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("deploy.kubernetes.api.RETRY_DELAYS_S", (0.01, 0.01, 0.01))
    k8s_cluster.fail_next("POST", "jobs", status=500, times=2)
    k8s_backend.apply_job(job=job_request)
    assert [j["metadata"]["name"] for j in k8s_cluster.list("jobs")] == ["job-42-r1"]

    k8s_cluster.fail_next("GET", "jobs", status=503, times=10)
    with pytest.raises(TransientError, match="HTTP 503"):
        k8s_backend.observe_job(ref=job_request.ref)


def test_a_client_error_is_not_retried(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    from kubernetes.client.exceptions import ApiException

    from deploy.types import DeployError, TransientError

    k8s_cluster.fail_next("POST", "jobs", status=403, times=1)
    with pytest.raises(DeployError) as raised:  # final: the job ends in ERROR with the reason
        k8s_backend.apply_job(job=job_request)
    assert not isinstance(raised.value, TransientError)
    assert "(HTTP 403)" in str(raised.value)
    assert isinstance(raised.value.__cause__, ApiException)
    assert sum(1 for method, path in methods(k8s_cluster) if path.endswith("/jobs")) == 2


def test_ensure_project_is_idempotent_and_follows_quota_changes(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, project_request: ProjectRequest
) -> None:
    k8s_backend.ensure_project(project=project_request)
    k8s_backend.ensure_project(project=project_request)
    assert [n["metadata"]["name"] for n in k8s_cluster.list("namespaces")] == ["ajuste-vision"]
    assert len(k8s_cluster.list("networkpolicies", "ajuste-vision")) == 6
    binding = k8s_cluster.get("rolebindings", "ajuste-vision", "ajuste-controller")
    assert binding is not None and binding["subjects"][0]["namespace"] == "ajuste"

    k8s_backend.ensure_project(
        project=ProjectRequest(**{**project_request.__dict__, "gpu_quota": 16})
    )
    quota = k8s_cluster.get("resourcequotas", "ajuste-vision", "ajuste-quota")
    assert quota is not None and quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "16"}


def test_a_datastore_dropped_from_the_project_leaves_its_secret(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, project_request: ProjectRequest
) -> None:
    """A merge patch only adds to a Secret's `data`: once the project's last bucket on SBG is
    gone, the next apply must take SBG's keys out of the cluster's Secret, not keep them."""
    sbg = DatastoreConfig("SBG", "https://s3.sbg.example", "sbg", "AKIA-SBG", "sbg-secret")
    both = replace(project_request, datastores=(*project_request.datastores, sbg))
    k8s_backend.ensure_project(project=both)
    secret = k8s_cluster.get("secrets", "ajuste-vision", "ajuste-datastores")
    assert secret is not None and "SBG.secret_key" in secret["data"]

    k8s_backend.ensure_project(project=project_request)
    secret = k8s_cluster.get("secrets", "ajuste-vision", "ajuste-datastores")
    assert secret is not None
    assert sorted(secret["data"]) == [
        "GRA.access_key",
        "GRA.endpoint_url",
        "GRA.region",
        "GRA.secret_key",
    ]
    assert base64.b64decode(secret["data"]["GRA.secret_key"]) == b"gra-secret"

    k8s_backend.ensure_project(project=replace(project_request, datastores=()))
    secret = k8s_cluster.get("secrets", "ajuste-vision", "ajuste-datastores")
    assert secret is not None and not secret.get("data")
