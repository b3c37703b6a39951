"""A restored backup finds objects on the cluster that its rows do not name (made after the
dump). The restore procedure of docs/deploy-kubernetes.md, followed here with pg_dump and
pg_restore on the test's own database while workloads run on the emulator: nothing made after
the dump is deleted, what the dump knows is adopted (its rows follow the cluster), and what it
does not know is listed on the capacity page with the times it will be stopped and deleted.

The graces count from the sweep that first noticed a run no row names (engine/orphans.py), not
from its objects' creation: a workspace made a week after the dump is still kept after the
restore. Its pods go JOB_ORPHAN_GRACE_SECONDS after that, its workspace claim
WORKSPACE_ORPHAN_GRACE_SECONDS after it (at least a day)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connections
from django.utils import timezone

from controlpanel.core.install import install_id
from controlpanel.engine import backend as engine_backend
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import ensure_project, job_ref
from controlpanel.engine.models import Orphan
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import job_finalize
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.jobs import tasks as job_tasks
from controlpanel.jobs.models import Job
from controlpanel.jobs.services import job_rerun
from controlpanel.jobs.states import JobState
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.services import notebook_create
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from deploy import names
from deploy.kubernetes.backend import KubernetesBackend
from deploy.types import NotebookRequest
from tests.deploy.conftest import CPU
from tests.fixtures.jobs import access_for, submit
from tests.fixtures.panel import logged_in

pytestmark = [pytest.mark.k8s]
NS = "ajuste-alpha"
WEEK = 7 * 86400


@pytest.fixture
def installed(k8s_cluster: Any, settings: Any) -> Iterator[KubernetesBackend]:
    """The panel's backend as production builds it: with this database's install id."""
    settings.COMPUTE_BACKEND = "kubernetes"
    client = k8s_cluster.api_client()
    backend = KubernetesBackend(api_client=client, watch_timeout_s=1, install_id=install_id())
    engine_backend.set_backend(backend)
    yield backend
    engine_backend.set_backend(None)
    client.close()


@pytest.fixture(autouse=True)
def _quiet_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks the sweep and the finalize send are run by hand here, or not needed."""
    from controlpanel.engine import tasks

    for task in (job_tasks.job_notify, tasks.project_admit, tasks.job_reconcile):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def made_after_the_dump(installed: KubernetesBackend, project: Project) -> NotebookRequest:
    """A notebook someone started after last night's dump: no row of the restored database."""
    notebook = NotebookRequest(
        id=str(uuid.uuid4()),
        project=project.slug,
        namespace=project.namespace,
        name="since-the-dump",
        image="quay.io/jupyter/minimal-notebook:python-3.12",
        flavor=CPU,
        token="editor-token",
    )
    ensure_project(project)
    installed.apply_notebook(notebook=notebook)
    return notebook


def workspace(cluster: Any, notebook_id: object) -> Any:
    return cluster.get("persistentvolumeclaims", NS, f"workspace-nb-{notebook_id}-0")


@pytest.mark.django_db
def test_a_notebook_without_a_row_is_kept_however_old(
    k8s_cluster: Any, installed: KubernetesBackend, project: Project
) -> None:
    """Made a week ago, first noticed now: neither its pod nor its workspace goes at the
    first sweep (before, the grace counted from the objects' creation, so a restore of a
    dump older than the grace lost them at once)."""
    k8s_cluster.store.clock_offset = -timedelta(days=7)
    notebook = made_after_the_dump(installed, project)
    k8s_cluster.store.clock_offset = timedelta()
    k8s_cluster.kubelet.run(NS, f"{names.notebook_name(notebook.ref)}-0")
    assert sweep()["orphans"] == 0
    assert k8s_cluster.get("statefulsets", NS, names.notebook_name(notebook.ref)) is not None
    assert workspace(k8s_cluster, notebook.id) is not None
    [noted] = Orphan.objects.all()
    assert (noted.kind, noted.workload_id, noted.stopped_at) == ("notebook", notebook.id, None)


@pytest.mark.django_db
def test_its_pod_goes_after_the_grace_its_workspace_a_day_later(
    k8s_cluster: Any, installed: KubernetesBackend, project: Project, settings: Any
) -> None:
    settings.JOB_ORPHAN_GRACE_SECONDS = 0
    settings.WORKSPACE_ORPHAN_GRACE_SECONDS = 86400
    notebook = made_after_the_dump(installed, project)
    assert sweep()["orphans"] == 1  # stopped: its StatefulSet and pod go
    k8s_cluster.reconcile()
    assert [o for o in installed.observe_all() if o.id == notebook.id] == []
    assert workspace(k8s_cluster, notebook.id) is not None
    assert sweep()["orphans"] == 0  # kept for the workspace grace
    Orphan.objects.update(noticed_at=timezone.now() - timedelta(hours=23))
    assert sweep()["orphans"] == 0
    assert workspace(k8s_cluster, notebook.id) is not None
    Orphan.objects.update(noticed_at=timezone.now() - timedelta(hours=24, seconds=1))
    assert sweep()["orphans"] == 1
    k8s_cluster.reconcile()
    assert workspace(k8s_cluster, notebook.id) is None
    assert not Orphan.objects.exists()


def pg(*argv: str) -> None:
    """A PostgreSQL client program on the test database (its connection settings)."""
    db = django_settings.DATABASES["default"]
    env = os.environ | {"PGPASSWORD": db.get("PASSWORD") or ""}
    where = ["-h", db.get("HOST") or "127.0.0.1", "-p", str(db.get("PORT") or 5432)]
    where += ["-U", db.get("USER") or "postgres", "-d", db["NAME"]]
    done = subprocess.run([*argv, *where], capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def dump(path: Path) -> None:
    connections.close_all()
    pg("pg_dump", "--format=custom", f"--file={path}")


def restore(path: Path) -> None:
    """docs/deploy-kubernetes.md, step 3, on the test's database."""
    connections.close_all()
    pg("pg_restore", "--clean", "--if-exists", "--no-owner", str(path))


def running_job(cluster: Any, project: Project, owner: Any, name: str) -> Job:
    job = submit(project, owner, name=name, flavor="ai1-1-cpu", gpu=1)
    assert admit_jobs(project_id=project.pk) == [str(job.pk)]
    reconcile(str(job.pk))
    cluster.kubelet.run(NS, cluster.pod_of(NS, names.job_name(job_ref(Job.objects.get(pk=job.pk)))))
    return Job.objects.get(pk=job.pk)


def running_notebook(cluster: Any, project: Project, owner: Any, name: str) -> Notebook:
    data = {"name": name, "flavor": "ai1-1-cpu", "image": "python"}
    notebook = notebook_create(access=access_for(project), user=owner, data=data)
    admit_jobs(project_id=project.pk)
    reconcile(str(notebook.pk))
    cluster.kubelet.run(NS, f"nb-{notebook.pk}-0")
    return notebook


def objects_of(cluster: Any, workload_id: object, run: int | None = None) -> list[str]:
    found = []
    for plural in ("jobs", "pods", "statefulsets", "persistentvolumeclaims"):
        for obj in cluster.list(plural, NS):
            labels = obj["metadata"].get("labels") or {}
            if labels.get(names.ID) != str(workload_id):
                continue
            if run is None or labels.get(names.RUN) in (None, str(run)):
                found.append(f"{plural}/{obj['metadata']['name']}")
    return sorted(found)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_restoring_an_older_dump_while_workloads_run(
    k8s_cluster: Any,
    installed: KubernetesBackend,
    project: Project,
    owner: Any,
    admin_user: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    """Last night's dump knows job A (running) and notebook N. Since then A ended and was run
    again, job B and notebook M were started. The database is restored from the dump as the
    docs say: every one of those objects is still there after many sweeps; A's and N's rows
    follow the cluster; B, M and A's second run are listed as orphaned with their deadlines."""
    job_a = running_job(k8s_cluster, project, owner, "a")
    notebook_n = running_notebook(k8s_cluster, project, owner, "n")
    sweep()
    before = install_id()
    dump(tmp_path / "ajuste.dump")

    # After the dump: A ends and runs again, B and M start.
    k8s_cluster.kubelet.finish(NS, k8s_cluster.pod_of(NS, names.job_name(job_ref(job_a))))
    sweep()
    job_finalize(str(job_a.pk), 1)
    rerun = job_rerun(access=access_for(project), user=owner, job=Job.objects.get(pk=job_a.pk))
    admit_jobs(project_id=project.pk)
    reconcile(str(rerun.pk))
    job_b = running_job(k8s_cluster, project, owner, "b")
    notebook_m = running_notebook(k8s_cluster, project, owner, "m")
    sweep()
    made = {
        "a2": objects_of(k8s_cluster, job_a.pk, run=2),
        "b": objects_of(k8s_cluster, job_b.pk),
        "m": objects_of(k8s_cluster, notebook_m.pk),
    }
    assert all(made.values()) and any("persistentvolumeclaims" in o for o in made["m"])

    # The procedure: processes stopped (none run here), a long orphan grace, the restore,
    # then everything started again: the watcher's and beat's sweeps, many times.
    settings.JOB_ORPHAN_GRACE_SECONDS = WEEK
    restore(tmp_path / "ajuste.dump")
    assert install_id() == before
    assert not Job.objects.filter(pk=job_b.pk).exists()
    for _ in range(5):
        sweep()
        k8s_cluster.reconcile()
    assert objects_of(k8s_cluster, job_a.pk, run=2) == made["a2"]
    assert objects_of(k8s_cluster, job_b.pk) == made["b"]
    assert objects_of(k8s_cluster, notebook_m.pk) == made["m"]

    # Adopted: the dump's rows follow the cluster.
    job_a = Job.objects.get(pk=job_a.pk)
    assert (job_a.run, job_a.state) == (1, JobState.DONE), job_a.state_reason
    assert Notebook.objects.get(pk=notebook_n.pk).state == NotebookState.RUNNING
    # Reported: what no row names, with when it would be stopped and deleted.
    noted = {(o.workload_id, o.run) for o in Orphan.objects.all()}
    assert noted == {(str(job_a.pk), 2), (str(job_b.pk), 1), (str(notebook_m.pk), 1)}
    page = logged_in(admin_user).get("/dashboard/capacity/")
    text = page.content.decode()
    assert page.status_code == 200
    for workload_id in (job_a.pk, job_b.pk, notebook_m.pk):
        assert str(workload_id) in text
    stop_at = (timezone.now() + timedelta(seconds=WEEK)).strftime("%Y-%m-%d")
    assert text.count(f"orphaned, stopped at {stop_at}") == 3
    assert "deleted at" in text
