"""Two installs on one cluster (staging beside production, a restore test on a copy of the
database): every object carries its install's id (`ajuste.io/install`), and no install reads,
adopts, patches or deletes another's. Objects made before install ids are adopted by the
install whose rows name them, and deleted as orphans by none."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.apply import apply, delete, delete_labelled
from deploy.kubernetes.listing import list_installed, list_unlabelled
from deploy.manifests import make_job, make_notebook_service
from deploy.types import (
    ConflictError,
    JobRequest,
    NotebookRequest,
    Phase,
    ProjectRequest,
    WorkloadKind,
)
from tests.deploy.test_ajuste_on_kubernetes import full_scenario
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.store import RESOURCES

pytestmark = [pytest.mark.k8s]
NS = "ajuste-vision"
PROD, STAGING = "a0a0a0a0a0a0a0a0", "b1b1b1b1b1b1b1b1"
MANAGED_BY = "app.kubernetes.io/managed-by"


@pytest.fixture
def prod(k8s_cluster: EmulatedCluster) -> Iterator[KubernetesBackend]:
    client = k8s_cluster.api_client()
    yield KubernetesBackend(api_client=client, watch_timeout_s=1, install_id=PROD)
    client.close()


@pytest.fixture
def staging(k8s_cluster: EmulatedCluster) -> Iterator[KubernetesBackend]:
    """A second install with a copy of production's rows: the same job and notebook ids."""
    client = k8s_cluster.api_client()
    yield KubernetesBackend(api_client=client, watch_timeout_s=1, install_id=STAGING)
    client.close()


def run_job(cluster: EmulatedCluster, backend: KubernetesBackend, job: JobRequest) -> str:
    backend.apply_job(job=job)
    pod = cluster.pod_of(NS, "job-42-r1")
    cluster.kubelet.run(NS, pod)
    return pod


def install_of(obj: dict[str, object] | None) -> str | None:
    assert obj is not None
    return obj["metadata"]["labels"].get("ajuste.io/install")  # type: ignore[index,union-attr,no-any-return]


@pytest.mark.usefixtures("vision_namespace")
def test_every_object_of_a_run_carries_the_install(
    k8s_cluster: EmulatedCluster, prod: KubernetesBackend, job_request: JobRequest
) -> None:
    pod = run_job(k8s_cluster, prod, replace(job_request, install=""))
    for plural, name in (
        ("jobs", "job-42-r1"),
        ("pods", pod),
        ("persistentvolumeclaims", "job-42-r1-ws"),
    ):
        assert install_of(k8s_cluster.get(plural, NS, name)) == PROD, plural
    assert [j["metadata"]["name"] for j in list_installed(prod.api, "Job", NS, install=PROD)] == [
        "job-42-r1"
    ]
    assert list_installed(prod.api, "Job", NS, install=STAGING) == []


def test_every_object_the_backend_makes_carries_the_install(
    k8s_cluster: EmulatedCluster,
    prod: KubernetesBackend,
    project_request: ProjectRequest,
    job_request: JobRequest,
    notebook_request: NotebookRequest,
) -> None:
    """The RBAC test's full scenario (projects, jobs with their push Jobs, notebooks, apps,
    upgrades), run by an install with an id: every object left carrying Ajuste's label, pods
    made by the controllers included, carries that id. (The scenario's app request names
    another install: the backend's own id wins.)"""
    requests = [replace(r, install=PROD) for r in (project_request, job_request, notebook_request)]
    for _ in full_scenario(k8s_cluster, prod, *requests):  # type: ignore[arg-type]
        pass
    made = [
        (plural, obj["metadata"]["name"], obj["metadata"].get("labels") or {})
        for plural in RESOURCES
        for obj in k8s_cluster.created(plural)
    ]
    ours = [(p, n, labels) for p, n, labels in made if labels.get(MANAGED_BY) == "ajuste"]
    assert {plural for plural, _, _ in ours} >= {
        "jobs",
        "pods",
        "statefulsets",
        "deployments",
        "replicasets",
        "persistentvolumeclaims",
        "secrets",
        "services",
        "ingresses",
    }
    assert [(p, n) for p, n, labels in ours if labels.get("ajuste.io/install") != PROD] == []


@pytest.mark.usefixtures("vision_namespace")
def test_another_install_neither_sees_nor_deletes_a_run(
    k8s_cluster: EmulatedCluster,
    prod: KubernetesBackend,
    staging: KubernetesBackend,
    job_request: JobRequest,
) -> None:
    pod = run_job(k8s_cluster, prod, job_request)
    assert [o.id for o in prod.observe_all()] == ["42"]
    assert staging.observe_all() == []
    assert staging.observe_job(ref=job_request.ref).phase is Phase.GONE
    staging.delete_job(ref=job_request.ref)
    staging.release_workspace(ref=job_request.ref)
    assert k8s_cluster.get("jobs", NS, "job-42-r1") is not None
    assert k8s_cluster.get("pods", NS, pod) is not None
    assert k8s_cluster.get("persistentvolumeclaims", NS, "job-42-r1-ws") is not None
    assert prod.observe_job(ref=job_request.ref).phase is Phase.RUNNING


@pytest.mark.usefixtures("vision_namespace")
def test_another_install_never_adopts_an_object_of_the_same_name(
    k8s_cluster: EmulatedCluster,
    prod: KubernetesBackend,
    staging: KubernetesBackend,
    job_request: JobRequest,
    notebook_request: NotebookRequest,
) -> None:
    """A copy of production's database runs the same job ids: its apply finds production's
    Job under the deterministic name and refuses it instead of calling it its own."""
    run_job(k8s_cluster, prod, job_request)
    with pytest.raises(ConflictError, match=f"belongs to another Ajuste install \\({PROD}\\)"):
        staging.apply_job(job=job_request)
    prod.apply_notebook(notebook=notebook_request)
    before = k8s_cluster.get("statefulsets", NS, "nb-7")
    with pytest.raises(ConflictError, match="another Ajuste install"):
        staging.apply_notebook(notebook=replace(notebook_request, image="other:1"))
    assert k8s_cluster.get("statefulsets", NS, "nb-7") == before
    assert install_of(k8s_cluster.get("jobs", NS, "job-42-r1")) == PROD


@pytest.mark.usefixtures("vision_namespace")
def test_another_install_leaves_a_notebook_and_an_app_alone(
    k8s_cluster: EmulatedCluster,
    prod: KubernetesBackend,
    staging: KubernetesBackend,
    notebook_request: NotebookRequest,
) -> None:
    from tests.deploy.test_app_manifests import make_app_request

    app = make_app_request()
    prod.apply_notebook(notebook=notebook_request)
    prod.apply_app(app=app)
    assert staging.observe_notebook(ref=notebook_request.ref).phase is Phase.GONE
    assert staging.observe_app(ref=app.ref).phase is Phase.GONE
    staging.delete_notebook(ref=notebook_request.ref)
    staging.delete_app(ref=app.ref)
    for plural, name in (
        ("statefulsets", "nb-7"),
        ("services", "nb-7"),
        ("secrets", "nb-7"),
        ("deployments", "app-5f0c"),
        ("services", "app-5f0c"),
    ):
        assert install_of(k8s_cluster.get(plural, NS, name)) == PROD, (plural, name)
    prod.delete_notebook(ref=notebook_request.ref)
    assert k8s_cluster.get("statefulsets", NS, "nb-7") is None


def test_a_project_namespace_of_another_install_is_refused(
    k8s_cluster: EmulatedCluster,
    prod: KubernetesBackend,
    staging: KubernetesBackend,
    project_request: ProjectRequest,
) -> None:
    """Two installs with a project of the same slug would share its namespace, quota and
    datastore Secret: the second is told, and production's Secret keeps its keys."""
    prod.ensure_project(project=project_request)
    secret = k8s_cluster.get("secrets", NS, "ajuste-datastores")
    with pytest.raises(ConflictError, match=f"Namespace {NS} .* another Ajuste install"):
        staging.ensure_project(project=replace(project_request, datastores=()))
    assert k8s_cluster.get("secrets", NS, "ajuste-datastores") == secret


@pytest.mark.usefixtures("vision_namespace")
def test_delete_helpers_skip_another_installs_objects(
    k8s_cluster: EmulatedCluster, prod: KubernetesBackend, job_request: JobRequest
) -> None:
    apply(prod.api, make_job(job=replace(job_request, install=PROD)))
    selector = "ajuste.io/id=42"
    assert delete_labelled(prod.api, "Job", NS, selector, install=STAGING) == 0
    assert delete(prod.api, "Job", NS, "job-42-r1", install=STAGING) is False
    assert k8s_cluster.get("jobs", NS, "job-42-r1") is not None
    assert delete_labelled(prod.api, "Job", NS, selector, install=PROD) == 1
    assert k8s_cluster.get("jobs", NS, "job-42-r1") is None


@pytest.mark.usefixtures("vision_namespace")
def test_objects_from_before_install_ids_are_adopted_by_the_install_with_the_row(
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    prod: KubernetesBackend,
    job_request: JobRequest,
    notebook_request: NotebookRequest,
) -> None:
    """An upgrade: a run started by the previous release (no install label) is still observed,
    flagged `unlabelled` (an orphan sweep must not delete it: nothing says whose it is), listed
    by `list_unlabelled`; the install that applies it again labels it and owns it."""
    legacy = replace(job_request, install="")
    pod = run_job(k8s_cluster, k8s_backend, legacy)
    k8s_backend.apply_notebook(notebook=replace(notebook_request, install=""))
    assert install_of(k8s_cluster.get("jobs", NS, "job-42-r1")) is None
    seen = {o.kind: o for o in prod.observe_all()}
    assert seen[WorkloadKind.JOB].unlabelled and seen[WorkloadKind.JOB].phase is Phase.RUNNING
    assert seen[WorkloadKind.NOTEBOOK].unlabelled
    assert {o["metadata"]["name"] for o in list_unlabelled(prod.api, "Job", NS)} == {"job-42-r1"}
    prod.apply_job(job=job_request)  # the row's reconcile after the upgrade
    prod.apply_notebook(notebook=notebook_request)
    assert install_of(k8s_cluster.get("jobs", NS, "job-42-r1")) == PROD
    assert install_of(k8s_cluster.get("statefulsets", NS, "nb-7")) == PROD
    assert [o.unlabelled for o in prod.observe_all()] == [False, False]
    assert install_of(k8s_cluster.get("pods", NS, pod)) is None  # a Job's pods keep their labels
    prod.delete_job(ref=job_request.ref)
    k8s_cluster.reconcile()  # the pod's graceful end
    assert k8s_cluster.get("pods", NS, pod) is None


@pytest.mark.usefixtures("vision_namespace")
def test_a_backend_without_an_id_takes_no_labelled_object(
    k8s_backend: KubernetesBackend, notebook_request: NotebookRequest
) -> None:
    service = make_notebook_service(notebook=replace(notebook_request, install=PROD))
    apply(k8s_backend.api, service)
    with pytest.raises(ConflictError, match="another Ajuste install"):
        apply(
            k8s_backend.api, make_notebook_service(notebook=replace(notebook_request, install=""))
        )
