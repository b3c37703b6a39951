"""k8s/ (Ajuste itself on a cluster) renders and validates, and its RBAC grants exactly what the
Kubernetes backend does: every API call of a full scenario is allowed, every grant is used."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.apply import apply
from deploy.kustomize import KustomizeError, render
from deploy.manifests import (
    make_job,
    make_notebook_service,
    make_project_objects,
    make_workspace_claim,
)
from deploy.manifests.jobs import PUSH_BACKOFF_LIMIT
from deploy.types import EgressRule, JobRequest, NotebookRequest, ProjectRequest
from storage.datastore import DatastoreConfig
from tests.deploy.conftest import validate
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.store import RESOURCES

K8S = Path(__file__).resolve().parents[2] / "k8s"
NS = "ajuste-vision"
# Granted but never an API request of the backend: RBAC checks `bind` when a RoleBinding is
# created (escalation prevention).
NOT_A_REQUEST = {("cluster", "clusterroles", "bind")}


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render(K8S)


def test_renders_every_part_and_validates(objects: list[dict[str, Any]]) -> None:
    for manifest in objects:
        validate(manifest)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("ClusterRole", "ajuste-controller"),
        ("ClusterRole", "ajuste-project"),
        ("ClusterRoleBinding", "ajuste-controller"),
        ("ConfigMap", "ajuste-config"),
        ("Deployment", "ajuste-beat"),
        ("Deployment", "ajuste-watcher"),
        ("Deployment", "ajuste-web"),
        ("Deployment", "ajuste-worker"),
        ("Ingress", "ajuste"),
        ("Job", "ajuste-migrate"),
        ("Namespace", "ajuste"),
        ("Service", "ajuste-web"),
        ("ServiceAccount", "ajuste-controller"),
        ("ValidatingAdmissionPolicy", "ajuste-controller-scope"),
        ("ValidatingAdmissionPolicyBinding", "ajuste-controller-scope"),
    ]
    cluster_wide = ("Cluster", "Namespace", "ValidatingAdmissionPolicy")
    namespaced = [o for o in objects if not o["kind"].startswith(cluster_wide)]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"ajuste"}
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ajuste" for o in objects)


def test_the_secret_template_validates_and_is_not_applied(objects: list[dict[str, Any]]) -> None:
    template = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    validate(template)
    assert "Secret" not in {o["kind"] for o in objects}


def test_pods_are_restricted_probed_and_sized(objects: list[dict[str, Any]]) -> None:
    for workload in (o for o in objects if o["kind"] in ("Deployment", "Job")):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            assert container["image"] == "ghcr.io/ajuste/ajuste:0.1.0"
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert set(container["resources"]) == {"requests", "limits"}
    web = next(
        o for o in objects if o["metadata"]["name"] == "ajuste-web" and o["kind"] == "Deployment"
    )
    container = web["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        assert all(
            "livenessProbe" in c for c in deployment["spec"]["template"]["spec"]["containers"]
        )


def test_only_the_processes_that_call_the_cluster_get_a_token(
    objects: list[dict[str, Any]],
) -> None:
    pods = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("Deployment", "Job")
    }
    assert {
        name for name, pod in pods.items() if pod.get("automountServiceAccountToken", True)
    } == {
        "ajuste-web",
        "ajuste-worker",
        "ajuste-watcher",
    }
    assert {pod.get("serviceAccountName") for pod in pods.values()} == {"ajuste-controller", None}


def test_rbac_has_no_wildcard_no_exec_no_cluster_wide_secrets(
    objects: list[dict[str, Any]],
) -> None:
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    for role in roles.values():
        for rule in role["rules"]:
            words = [*rule["apiGroups"], *rule["resources"], *rule["verbs"]]
            assert "*" not in words
            assert not {"pods/exec", "pods/attach", "pods/portforward"} & set(rule["resources"])
            assert not {"escalate", "impersonate"} & set(rule["verbs"])
    cluster_wide = {r for rule in roles["ajuste-controller"]["rules"] for r in rule["resources"]}
    assert "secrets" not in cluster_wide
    bind = next(r for r in roles["ajuste-controller"]["rules"] if "bind" in r["verbs"])
    assert bind["resourceNames"] == ["ajuste-project"]


def test_the_renderer_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\npatches: []\n")
    with pytest.raises(KustomizeError, match="unsupported kustomization fields"):
        render(tmp_path)


def granted(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(scope, resource, verb): `cluster` grants hold everywhere, `namespace` ones in projects."""
    scope = {"ajuste-controller": "cluster", "ajuste-project": "namespace"}
    return {
        (scope[role["metadata"]["name"]], resource, verb)
        for role in objects
        if role["kind"] == "ClusterRole"
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def used(cluster: EmulatedCluster) -> set[tuple[str, str, str]]:
    """What the recorded requests needed, as RBAC sees them."""
    needs = set()
    for request in cluster.requests():
        parts = request.url.path.strip("/").split("/")
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        scope = "namespace" if rest[0] == "namespaces" and len(rest) > 2 else "cluster"
        rest = rest[2:] if scope == "namespace" else rest
        resource = "/".join([rest[0], *rest[2:3]])
        named = len(rest) > 1
        verb = {
            "POST": "create",
            "PATCH": "patch",
            "DELETE": "delete",
            "GET": "get" if named else ("watch" if request.params.get("watch") else "list"),
        }[str(request.method.value)]
        needs.add((scope, resource, verb))
    return needs


def allowed(need: tuple[str, str, str], grants: set[tuple[str, str, str]]) -> bool:
    scope, resource, verb = need
    return ("cluster", resource, verb) in grants or (
        scope == "namespace" and ("namespace", resource, verb) in grants
    )


@pytest.mark.k8s
def test_rbac_grants_exactly_what_the_backend_does(
    objects: list[dict[str, Any]],
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    project_request: ProjectRequest,
    job_request: JobRequest,
    notebook_request: NotebookRequest,
) -> None:
    for _ in full_scenario(
        k8s_cluster, k8s_backend, project_request, job_request, notebook_request
    ):
        pass
    grants = granted(objects)
    needs = used(k8s_cluster)
    assert {need for need in needs if not allowed(need, grants)} == set()
    unused = {g for g in grants if not any(allowed(n, {g}) for n in needs)} - NOT_A_REQUEST
    assert unused == set()
    assert {resource for _, resource, _ in needs} <= {*RESOURCES, "pods/log"}


def full_scenario(
    cluster: EmulatedCluster,
    backend: KubernetesBackend,
    project: ProjectRequest,
    job: JobRequest,
    notebook: NotebookRequest,
) -> Iterator[None]:
    """Everything the panel makes the backend do, upgrades and races included."""
    project_steps(cluster, backend, project, notebook)
    yield
    job_steps(cluster, backend, job)
    yield
    notebook_steps(cluster, backend, notebook)
    yield


def project_steps(
    cluster: EmulatedCluster,
    backend: KubernetesBackend,
    project: ProjectRequest,
    notebook: NotebookRequest,
) -> None:
    # Objects an older Ajuste made (a different spec hash): applying them again patches them.
    stale = {"metadata": {"annotations": {"ajuste.io/spec-hash": "older-release"}}}
    first_two = make_project_objects(
        project=project, service_account="ajuste-controller", service_account_namespace="ajuste"
    )[:2]
    for manifest in first_two:
        plural = "namespaces" if manifest["kind"] == "Namespace" else "rolebindings"
        cluster.store.create(plural, manifest["metadata"].get("namespace"), merge(manifest, stale))
    cluster.store.create("services", NS, merge(make_notebook_service(notebook=notebook), stale))
    cluster.emulator._requests.clear()
    backend.ensure_project(project=project)
    changed = replace(
        project,
        gpu_quota=4,
        default_cpu="1",
        ingress_namespace="ingress",
        egress=(EgressRule(cidr="198.51.100.0/24"),),
        datastores=(DatastoreConfig("GRA", "https://s3.gra", "gra", "new-key", "new-secret"),),
    )
    backend.ensure_project(project=changed)


def job_steps(cluster: EmulatedCluster, backend: KubernetesBackend, job: JobRequest) -> None:
    backend.apply_job(job=job)
    apply(backend.api, make_job(job=job))  # a racing duplicate task: 409, then read
    pod = cluster.pod_of(NS, "job-42-r1")
    cluster.kubelet.unschedulable(NS, pod, "0/3 nodes are available")
    backend.observe_all()
    cluster.kubelet.run(NS, pod)
    cluster.kubelet.log(NS, pod, "hello")
    backend.read_logs(ref=job.ref, cursor=None)
    cluster.kubelet.finish(NS, pod, exit_code=0)
    backend.apply_job(job=job)
    for _ in range(PUSH_BACKOFF_LIMIT + 1):  # the push Job fails after its retries
        cluster.kubelet.finish(NS, cluster.pod_of(NS, "job-42-r1-push-1"), exit_code=1)
    backend.retry_push(job=job)
    assert cluster.get("jobs", NS, "job-42-r1-push-2") is not None
    backend.delete_job(ref=job.ref)
    # A crashed task left the workspace claim without its Job: the next apply adopts it.
    second = replace(job, id="43")
    orphan = make_workspace_claim(job=second)
    assert orphan is not None
    apply(backend.api, orphan)
    backend.apply_job(job=second)
    cluster.kubelet.run(NS, cluster.pod_of(NS, "job-43-r1"))
    backend.stop_job(job=second)


def notebook_steps(
    cluster: EmulatedCluster, backend: KubernetesBackend, notebook: NotebookRequest
) -> None:
    backend.apply_notebook(notebook=notebook)
    backend.observe_notebook(ref=notebook.ref)
    stop = threading.Event()
    changes = backend.watch(stop=stop, resync_s=60)
    for _ in backend.observe_all():
        next(changes)  # the list
    cluster.kubelet.run(NS, "nb-7-0")
    next(changes)  # the watch
    stop.set()
    backend.apply_notebook(notebook=replace(notebook, running=False, host="nb2.example"))
    backend.delete_notebook(ref=notebook.ref)


def merge(manifest: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    meta = {**manifest["metadata"]}
    meta["annotations"] = {**meta.get("annotations", {}), **extra["metadata"]["annotations"]}
    return {**manifest, "metadata": meta}
