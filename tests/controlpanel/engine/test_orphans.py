"""The sweep and what no row names (engine/orphans.py), through the real path: services,
admission, reconcile and the sweep on PostgreSQL, the emulator as the cluster. Only this
install's runs are noted, stopped and deleted: a run of another install on the same cluster
and a run made before install ids (no label) are left alone however long they stay, and are
never listed as this install's orphans."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.core.install import install_id
from controlpanel.engine import backend as engine_backend
from controlpanel.engine.backend import ensure_project
from controlpanel.engine.models import Orphan
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.projects.models import Project
from deploy import names
from deploy.kubernetes.backend import KubernetesBackend
from deploy.types import JobRequest, NotebookRequest
from tests.deploy.conftest import CPU
from tests.fixtures.panel import logged_in

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]
NS = "ajuste-alpha"
OTHER = "c2c2c2c2c2c2c2c2"
DAYS_AGO = timedelta(days=2)  # within a Job's own deadline (7 days)


@pytest.fixture
def backends(k8s_cluster: Any, settings: Any) -> Iterator[dict[str, KubernetesBackend]]:
    """This install's backend (the panel's), another install's and one of 0.1.0 (no id)."""
    settings.COMPUTE_BACKEND = "kubernetes"
    settings.JOB_ORPHAN_GRACE_SECONDS = 0
    settings.WORKSPACE_ORPHAN_GRACE_SECONDS = 86400
    clients = [k8s_cluster.api_client() for _ in range(3)]
    made = {
        "ours": KubernetesBackend(api_client=clients[0], install_id=install_id()),
        "other": KubernetesBackend(api_client=clients[1], install_id=OTHER),
        "old": KubernetesBackend(api_client=clients[2]),
    }
    engine_backend.set_backend(made["ours"])
    yield made
    engine_backend.set_backend(None)
    for client in clients:
        client.close()


def a_notebook(backend: KubernetesBackend, project: Project) -> NotebookRequest:
    notebook = NotebookRequest(
        id=str(uuid.uuid4()),
        project=project.slug,
        namespace=project.namespace,
        name="nobody-knows",
        image="quay.io/jupyter/minimal-notebook:python-3.12",
        flavor=CPU,
        token="editor-token",
    )
    backend.apply_notebook(notebook=notebook)
    return notebook


def a_job(backend: KubernetesBackend, project: Project) -> JobRequest:
    job = JobRequest(
        id=str(uuid.uuid4()),
        project=project.slug,
        namespace=project.namespace,
        name="nobody-knows",
        image="registry.example.com/train:1",
        command=("python", "train.py"),
        flavor=CPU,
    )
    backend.apply_job(job=job)
    return job


def everything(cluster: Any) -> list[str]:
    return sorted(
        f"{plural}/{obj['metadata']['name']}"
        for plural in ("jobs", "pods", "statefulsets", "persistentvolumeclaims")
        for obj in cluster.list(plural, NS)
        if not obj["metadata"].get("deletionTimestamp")
    )


def test_runs_of_another_install_and_from_before_install_ids_are_never_touched(
    k8s_cluster: Any, backends: dict[str, KubernetesBackend], project: Project
) -> None:
    """Old enough, no row, graces of 0 s and a day long past: still nothing goes."""
    ensure_project(project)
    k8s_cluster.store.clock_offset = -DAYS_AGO
    for backend in (backends["other"], backends["old"]):
        notebook, job = a_notebook(backend, project), a_job(backend, project)
        k8s_cluster.kubelet.run(NS, f"{names.notebook_name(notebook.ref)}-0")
        k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, names.job_name(job.ref)))
    k8s_cluster.store.clock_offset = timedelta()
    before = everything(k8s_cluster)
    assert len(before) == 10  # two of each: a Job and its pod, a StatefulSet, its pod, its claim
    for _ in range(3):
        assert sweep()["orphans"] == 0
        Orphan.objects.update(noticed_at=timezone.now() - DAYS_AGO)
        k8s_cluster.reconcile()
    assert everything(k8s_cluster) == before
    assert not Orphan.objects.exists()


def test_this_installs_runs_beside_them_are_collected(
    k8s_cluster: Any, backends: dict[str, KubernetesBackend], project: Project, admin_user: Any
) -> None:
    """The same scene with one run of this install: it alone is noted, listed, stopped."""
    ensure_project(project)
    kept = [a_job(backends["other"], project), a_job(backends["old"], project)]
    ours = a_notebook(backends["ours"], project)
    k8s_cluster.kubelet.run(NS, f"{names.notebook_name(ours.ref)}-0")
    assert sweep()["orphans"] == 1  # noted at the first sweep, stopped at once (0 s)
    [noted] = Orphan.objects.all()
    assert (noted.workload_id, noted.workspace_kept) == (ours.id, True)
    page = logged_in(admin_user).get("/dashboard/capacity/").content.decode()
    assert ours.id in page and "workspace deleted at" in page
    assert all(job.id not in page for job in kept)
    k8s_cluster.reconcile()
    left = everything(k8s_cluster)
    assert f"persistentvolumeclaims/workspace-{names.notebook_name(ours.ref)}-0" in left
    assert f"statefulsets/{names.notebook_name(ours.ref)}" not in left
    for job in kept:
        assert f"jobs/{names.job_name(job.ref)}" in left
