"""Notebooks through the workload engine on the emulated cluster: the same admission,
reconcile, sweep, runs and logs as jobs. STARTING → RUNNING → STOPPING → STOPPED → STARTING
again at the same address with the same workspace claim; a start over quota waits in line;
an idle notebook is stopped; a deleted one leaves nothing behind but its billed runs."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.collector import LogCollector
from controlpanel.engine.contract import SpecError as JobSpecError
from controlpanel.engine.lifecycle import apply_observation
from controlpanel.engine.models import JobLogLine, JobRun
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.services import (
    notebook_create,
    notebook_delete,
    notebook_keep_alive,
    notebook_start,
    notebook_stop,
)
from controlpanel.notebooks.states import NotebookState
from controlpanel.notebooks.validation import validate_notebook
from controlpanel.projects.models import Project
from controlpanel.usercontent.hosts import content_host
from tests.fixtures.jobs import access_for

pytestmark = [pytest.mark.k8s, pytest.mark.django_db(transaction=True)]
NS = "ajuste-alpha"
N = NotebookState


def create(project: Project, owner: Any, **data: Any) -> Notebook:
    payload = {"name": "explore", "flavor": "ai1-1-cpu", "image": "python"} | data
    return notebook_create(access=access_for(project), user=owner, data=payload)


def started(k8s_cluster: Any, notebook: Notebook) -> Notebook:
    """Admitted, reconciled, its pod running, seen by the sweep."""
    admit_jobs(project_id=notebook.project_id)
    reconcile(str(notebook.pk))
    k8s_cluster.kubelet.run(NS, f"nb-{notebook.pk}-0")
    sweep()
    notebook.refresh_from_db()
    return notebook


def stopped(k8s_cluster: Any) -> None:
    """The kubelet stops the terminating pods, then the sweep sees them gone."""
    k8s_cluster.reconcile()
    sweep()


def claim_uid(k8s_cluster: Any, notebook: Notebook) -> str:
    claim = k8s_cluster.get("persistentvolumeclaims", NS, f"workspace-nb-{notebook.pk}-0")
    assert claim is not None
    return str(claim["metadata"]["uid"])


def test_start_stop_start_keeps_the_address_and_the_workspace(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    notebook = create(project, owner)
    assert (notebook.state, notebook.kind) == (N.STARTING, "notebook")
    notebook = started(k8s_cluster, notebook)
    assert notebook.state == N.RUNNING, notebook.state_reason
    url = notebook.url
    # Its own host under USER_CONTENT_DOMAIN, served at its root.
    assert url == f"https://{content_host('nb', notebook.pk).netloc}/"
    workspace = claim_uid(k8s_cluster, notebook)
    k8s_cluster.kubelet.log(NS, f"nb-{notebook.pk}-0", "[I ServerApp] Jupyter Server is running")
    LogCollector().tick()
    assert JobLogLine.objects.filter(job=notebook).count() == 1  # logs: the jobs' collector

    notebook_stop(access=access_for(project), user=owner, notebook=notebook)
    notebook.refresh_from_db()
    assert notebook.state == N.STOPPING
    reconcile(str(notebook.pk))
    notebook.refresh_from_db()
    assert notebook.state == N.STOPPING  # its pod terminates
    stopped(k8s_cluster)
    notebook.refresh_from_db()
    assert (
        notebook.state == N.STOPPED and k8s_cluster.get("pods", NS, f"nb-{notebook.pk}-0") is None
    )

    notebook = notebook_start(access=access_for(project), user=owner, notebook=notebook)
    assert (notebook.state, notebook.run) == (N.STARTING, 2)
    notebook = started(k8s_cluster, notebook)
    assert notebook.state == N.RUNNING and notebook.url == url
    assert claim_uid(k8s_cluster, notebook) == workspace
    runs = JobRun.objects.filter(job=notebook).order_by("run")
    assert [r.run for r in runs] == [1, 2] and runs[0].uid != runs[1].uid  # metered per start
    assert runs[0].finished_at is not None
    states = list(notebook.events.values_list("state", flat=True))
    assert states[0] == N.STARTING and N.STOPPED in states and states[-1] == N.RUNNING


def test_a_start_over_quota_waits_in_line_with_its_position(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    project.cpu_quota = 1
    project.save()
    first, second = create(project, owner, name="a"), create(project, owner, name="b")
    admit_jobs(project_id=project.pk)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.admitted_at is not None and second.admitted_at is None
    assert second.state == N.STARTING and "CPU quota" in second.state_reason
    assert "position 1 in the queue" in second.state_reason
    started(k8s_cluster, first)
    notebook_stop(access=access_for(project), user=owner, notebook=first)
    reconcile(str(first.pk))
    admit_jobs(project_id=project.pk)
    second.refresh_from_db()
    assert second.admitted_at is None  # the first's pod still terminates, holding its CPU
    stopped(k8s_cluster)
    admit_jobs(project_id=project.pk)  # what finalizing the stop enqueues
    second.refresh_from_db()
    assert second.admitted_at is not None


def test_an_idle_notebook_is_stopped_unless_kept_alive(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    project.notebook_idle_minutes = 30
    project.save()
    busy, idle = create(project, owner, name="busy"), create(project, owner, name="idle")
    for notebook in (busy, idle):
        started(k8s_cluster, notebook)
    long_ago = timezone.now() - timedelta(minutes=31)
    Notebook.objects.filter(pk__in=[busy.pk, idle.pk]).update(last_activity_at=long_ago)
    notebook_keep_alive(access=access_for(project), user=owner, notebook=busy)
    sweep()  # an observation (with no activity of its own) must not undo the click
    busy.refresh_from_db()
    assert busy.state == N.RUNNING and busy.last_activity_at > long_ago
    idle.refresh_from_db()
    assert idle.state == N.STOPPING
    assert idle.state_reason == "idle for 30 min: no kernel, terminal or request"


def test_delete_removes_the_objects_then_the_row_and_keeps_the_runs(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    notebook = started(k8s_cluster, create(project, owner))
    notebook_delete(access=access_for(project), user=owner, notebook=notebook)
    reconcile(str(notebook.pk))
    assert not Notebook.objects.filter(pk=notebook.pk).exists()
    k8s_cluster.reconcile()  # the pod stops; its claim's protection lets the claim go
    for plural in ("statefulsets", "services", "ingresses", "pods", "persistentvolumeclaims"):
        assert k8s_cluster.list(plural, NS) == [], plural
    [run] = JobRun.objects.filter(project=project)
    assert run.finished_at is not None  # ended with its pod: billed no further


def test_bad_requests_say_what_is_wrong_under_stable_keys(project: Project, owner: Any) -> None:
    with pytest.raises(JobSpecError) as error:
        validate_notebook(
            project=project,
            data={
                "flavor": "nope",
                "image": "cobol",
                "editor": "emacs",
                "volumes": ["s3://x@LOCAL/data:/workspace/data:rw", "bad spec"],
                "env": {"1BAD": "x"},
            },
        )
    keys = set(error.value.by_key)
    assert {"flavor", "image", "volumes.1", "env.1BAD"} <= keys
    with pytest.raises(JobSpecError) as wrong_editor:
        validate_notebook(
            project=project, data={"flavor": "ai1-1-cpu", "image": "python", "editor": "vscode"}
        )
    assert "serves jupyterlab, not vscode" in wrong_editor.value.by_key["editor"][0]
    with pytest.raises(JobSpecError) as not_here:  # the local backend has no code-server
        validate_notebook(
            project=project, data={"flavor": "ai1-1-cpu", "image": "vscode", "editor": "vscode"}
        )
    assert "VS Code (code-server) is not installed" in not_here.value.by_key["editor"][0]
    assert not Notebook.objects.exists()


def test_only_the_owner_or_a_manager_acts_and_states_are_checked(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, member: Any
) -> None:
    notebook = create(project, owner)
    with pytest.raises(ValidationError, match="stop it first"):
        notebook_start(access=access_for(project), user=owner, notebook=notebook)
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        notebook_stop(access=access_for(project, role="member"), user=member, notebook=notebook)


def test_an_older_activity_seen_on_the_server_never_undoes_keep_alive(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    notebook = started(k8s_cluster, create(project, owner))
    kept = notebook_keep_alive(access=access_for(project), user=owner, notebook=notebook)
    seen = k8s_jobs.observe_notebook(ref=job_ref(notebook))
    older = replace(seen, last_activity=kept.last_activity_at - timedelta(minutes=40))
    apply_observation(kept, older)
    kept.refresh_from_db()
    assert kept.last_activity_at > older.last_activity  # the click wins over the older sight
    newer = replace(seen, last_activity=kept.last_activity_at + timedelta(minutes=1))
    apply_observation(kept, newer)
    kept.refresh_from_db()
    assert kept.last_activity_at == newer.last_activity
