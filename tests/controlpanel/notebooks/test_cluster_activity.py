"""A notebook's activity on a cluster (issue 31): the sweep asks each running notebook's server
what it last did, through its Service with the server's own token (JupyterLab's
`/api/status`, a busy kernel counting as now; code-server's heartbeat), as the local backend's
supervisor does. So the project's idle limit works the same on both backends: a notebook in
use is kept, also after "Keep it running", and one untouched past the limit is stopped with a
reason of its own. The stand-in servers answer on loopback at the Service URL the panel builds
(APP_SERVICE_URL), the clock is frozen (tests/fixtures/clock.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.notebooks.auth import notebook_path
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.services import notebook_create, notebook_keep_alive
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from tests.fixtures.clock import FrozenClock
from tests.fixtures.editors import EditorServers
from tests.fixtures.jobs import access_for

pytestmark = [pytest.mark.k8s, pytest.mark.django_db(transaction=True)]
NS = "ajuste-alpha"
N = NotebookState
IDLE_120 = "idle for 120 min: no kernel, terminal or request"


def running(k8s_cluster: Any, project: Project, owner: Any, **data: Any) -> Notebook:
    payload = {"name": "explore", "flavor": "ai1-1-cpu", "image": "python"} | data
    notebook = notebook_create(access=access_for(project), user=owner, data=payload)
    admit_jobs(project_id=notebook.project_id)
    reconcile(str(notebook.pk))
    k8s_cluster.kubelet.run(NS, f"nb-{notebook.pk}-0")
    sweep()
    notebook.refresh_from_db()
    assert notebook.state == N.RUNNING, notebook.state_reason
    return notebook


@pytest.fixture
def limit_120(project: Project) -> Project:
    project.notebook_idle_minutes = 120
    project.save()
    return project


def test_used_in_the_last_10_minutes_is_kept_untouched_for_121_is_stopped(
    k8s_cluster: Any,
    k8s_jobs: Any,
    limit_120: Project,
    owner: Any,
    editor_servers: EditorServers,
    frozen_clock: FrozenClock,
) -> None:
    used = running(k8s_cluster, limit_120, owner, name="used")
    untouched = running(k8s_cluster, limit_120, owner, name="untouched")
    started = frozen_clock.now()
    editor_servers.serve(used, last_activity=started)
    editor_servers.serve(untouched, last_activity=started)
    sweep()

    frozen_clock.advance(timedelta(minutes=121))
    editor_servers.serve(used, last_activity=frozen_clock.now() - timedelta(minutes=10))
    sweep()

    used.refresh_from_db()
    assert used.state == N.RUNNING, used.state_reason
    assert used.last_activity_at == frozen_clock.now() - timedelta(minutes=10)
    untouched.refresh_from_db()
    assert untouched.state == N.STOPPING
    assert untouched.state_reason == IDLE_120
    assert untouched.last_activity_at == started
    reconcile(str(untouched.pk))  # what the stop enqueued: replicas 0
    k8s_cluster.reconcile()  # its pod stops
    sweep()
    untouched.refresh_from_db()
    assert (untouched.state, untouched.state_reason) == (N.STOPPED, IDLE_120)
    # Each server was asked through its own Service, with its own run's token.
    asked = {path for path, _ in editor_servers.requests}
    assert f"/svc/nb-{used.pk}.{NS}:80{notebook_path(used)}api/status" in asked


def test_keep_it_running_then_use_it_is_not_stopped_at_the_clicks_limit(
    k8s_cluster: Any,
    k8s_jobs: Any,
    limit_120: Project,
    owner: Any,
    editor_servers: EditorServers,
    frozen_clock: FrozenClock,
) -> None:
    """The bug of issue 31: after "Keep it running", a cluster notebook was stopped 120
    minutes after the click, though its user had worked in it since."""
    notebook = running(k8s_cluster, limit_120, owner)
    editor_servers.serve(notebook, last_activity=frozen_clock.now())
    frozen_clock.advance(timedelta(minutes=5))
    notebook_keep_alive(access=access_for(limit_120), user=owner, notebook=notebook)
    clicked = frozen_clock.now()

    frozen_clock.advance(timedelta(minutes=110))
    editor_servers.serve(notebook, last_activity=frozen_clock.now() - timedelta(minutes=1))
    sweep()
    frozen_clock.advance(timedelta(minutes=15))  # 125 minutes after the click
    sweep()

    notebook.refresh_from_db()
    assert notebook.state == N.RUNNING, notebook.state_reason
    assert notebook.last_activity_at == clicked + timedelta(minutes=109)


def test_a_busy_kernel_and_a_code_server_heartbeat_count_as_activity(
    k8s_cluster: Any,
    k8s_jobs: Any,
    limit_120: Project,
    owner: Any,
    editor_servers: EditorServers,
    frozen_clock: FrozenClock,
) -> None:
    """A cell that runs for hours prints nothing: its busy kernel is activity now. code-server
    says when it last had a request (its heartbeat, in milliseconds)."""
    frozen_clock.instant = frozen_clock.now().replace(microsecond=0)  # whole milliseconds
    computing = running(k8s_cluster, limit_120, owner, name="computing")
    vscode = running(k8s_cluster, limit_120, owner, name="code", image="vscode", editor="vscode")
    started = frozen_clock.now()
    editor_servers.serve(computing, last_activity=started, busy=True)
    editor_servers.serve(vscode, last_activity=started)
    sweep()
    frozen_clock.advance(timedelta(minutes=100))
    editor_servers.serve(vscode, last_activity=frozen_clock.now() - timedelta(minutes=3))
    sweep()
    frozen_clock.advance(timedelta(minutes=30))
    sweep()

    computing.refresh_from_db()
    assert computing.state == N.RUNNING, computing.state_reason
    assert computing.last_activity_at == frozen_clock.now()  # busy when last asked
    vscode.refresh_from_db()
    assert vscode.state == N.RUNNING, vscode.state_reason
    assert vscode.last_activity_at == started + timedelta(minutes=97)
    assert any(
        path.endswith(f"nb-{vscode.pk}.{NS}:80/healthz") for path, _ in editor_servers.requests
    )


def test_a_server_that_does_not_answer_is_never_taken_for_idle_and_no_page_asks_it(
    k8s_cluster: Any,
    k8s_jobs: Any,
    limit_120: Project,
    owner: Any,
    owner_client: Client,
    editor_servers: EditorServers,
    frozen_clock: FrozenClock,
) -> None:
    """No answer is no activity known: the notebook keeps waiting for one (nothing stops it
    for idleness); and a page read never reaches a notebook's server (the sweep does)."""
    notebook = running(k8s_cluster, limit_120, owner)
    frozen_clock.advance(timedelta(minutes=500))
    sweep()  # the stand-in has no such Service: 404
    notebook.refresh_from_db()
    assert notebook.state == N.RUNNING and notebook.last_activity_at is None

    editor_servers.serve(notebook, last_activity=frozen_clock.now())
    before = len(editor_servers.requests)
    for url in (f"/p/alpha/notebooks/{notebook.pk}/", "/p/alpha/notebooks/"):
        assert owner_client.get(url).status_code == 200
    assert owner_client.get(f"/api/v1/notebooks/{notebook.pk}/").status_code in (200, 401, 403)
    assert len(editor_servers.requests) == before
