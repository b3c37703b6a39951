"""The GPU idle policy where people meet it (issue 31): the project's settings (API and page,
managers only, a bad value named and nothing changed), and the workload's page (the window and
threshold, the warning's banner, a small chart of its busiest GPU), the owner's webhook. The
check runs on samples given in hand (the Prometheus stand-in's tests: test_gpu_idle_policy.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlpanel.dashboards.dcgm import GpuSeries, Samples
from controlpanel.engine.models import Workload
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.reclaim.models import GpuIdleNotice, GpuIdleWatch
from controlpanel.reclaim.policy import Policy
from controlpanel.reclaim.services import Checked, check_one
from controlpanel.reclaim.tasks import gpu_idle_webhook

pytestmark = pytest.mark.django_db
URL = "/api/v1/projects/alpha/"
PAGE = "/p/alpha/settings/"
MINUTE = timedelta(minutes=1)
POLICY = {
    "gpu_idle_percent": 15,
    "gpu_idle_minutes": 30,
    "gpu_idle_grace_minutes": 10,
    "gpu_idle_jobs": "stop",
}


def _policy_of(project: Project) -> dict[str, Any]:
    project.refresh_from_db()
    return {name: getattr(project, name) for name in POLICY}


AS_MADE = {
    "gpu_idle_percent": 10,
    "gpu_idle_minutes": 0,
    "gpu_idle_grace_minutes": 30,
    "gpu_idle_jobs": "warn",
}


def test_a_manager_sets_the_policy_through_the_api(owner_api: APIClient, project: Project) -> None:
    assert _policy_of(project) == AS_MADE  # off until a manager sets it
    answer = owner_api.patch(URL, POLICY, format="json")
    assert answer.status_code == 200, answer.content
    assert {name: answer.json()[name] for name in POLICY} == POLICY
    assert _policy_of(project) == POLICY


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"gpu_idle_jobs": "kill"}, "gpu_idle_jobs", '"kill" is not a valid choice.'),
        ({"gpu_idle_percent": 0}, "gpu_idle_percent", "greater than or equal to 1"),
        ({"gpu_idle_percent": 101}, "gpu_idle_percent", "less than or equal to 100"),
        ({"gpu_idle_minutes": -5}, "gpu_idle_minutes", "greater than or equal to 0"),
    ],
)
def test_a_bad_policy_value_is_named_and_nothing_changes(
    owner_api: APIClient, project: Project, body: dict[str, Any], field: str, says: str
) -> None:
    answer = owner_api.patch(URL, {"gpu_idle_minutes": 20, **body}, format="json")
    assert answer.status_code == 400, answer.content
    assert says in str(answer.json()[field]), answer.json()
    assert _policy_of(project) == AS_MADE


def test_the_settings_page_sets_the_policy_for_managers_only(
    owner_client: Client, member: Any, project: Project
) -> None:
    page = owner_client.get(PAGE).content.decode()
    for name in POLICY:
        assert f'name="{name}"' in page
    saved = owner_client.post(PAGE, {name: str(value) for name, value in POLICY.items()})
    assert saved.status_code == 302, saved.content.decode()
    assert _policy_of(project) == POLICY
    member_client = Client()
    member_client.force_login(member)
    refused = member_client.post(PAGE, {"gpu_idle_minutes": "1"})
    assert refused.status_code == 403 and _policy_of(project) == POLICY


@pytest.fixture
def hook() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    received: list[tuple[dict[str, str], bytes]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(
                (dict(self.headers), self.rfile.read(int(self.headers["Content-Length"])))
            )
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()


def running_on_a_gpu(project: Project, owner: Any, kind: str, name: str) -> Workload:
    start = datetime.now(UTC) - timedelta(hours=1)
    return Workload.objects.create(
        project=project,
        owner=owner,
        flavor=Flavor.objects.get(name="h100-1-gpu"),
        name=name,
        image="img",
        kind=kind,
        gpu=1,
        state="RUNNING",
        queued_at=start,
        admitted_at=start,
        started_at=start,
    )


def checked(workload: Workload, values: list[float], *, now: datetime) -> Checked:
    """One check of `workload` over samples a minute apart, the last at `now`."""
    first = int(now.timestamp()) - 60 * (len(values) - 1)
    series = GpuSeries(
        workload=str(workload.pk),
        namespace=workload.project.namespace,
        pod=f"nb-{workload.pk}-0",
        gpu="0",
        points={first + 60 * n: value for n, value in enumerate(values)},
    )
    done = Checked()
    policy = Policy.of(workload.project)
    check_one(workload, policy=policy, samples=Samples(series=[series]), now=now, done=done)
    return done


def test_the_workload_page_shows_the_window_a_warning_and_the_chart(
    owner_client: Client, project: Project, owner: Any
) -> None:
    Project.objects.filter(pk=project.pk).update(**POLICY)
    project.refresh_from_db()
    notebook = running_on_a_gpu(project, owner, "notebook", "explore")
    job = running_on_a_gpu(project, owner, "job", "train")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    busy = checked(notebook, [80] * 10, now=now)
    assert busy.counts["idle"] == 0 and busy.notices == []
    page = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/").content.decode()
    assert "GPUs below <strong>15 %</strong> utilisation for <strong>30 min</strong>" in page
    assert "10 min later this notebook is <strong>stopped</strong> (its workspace is kept)" in page
    assert "In use: its busiest GPU was at 80 %" in page
    assert 'data-testid="gpu-idle-chart"' in page and 'data-testid="gpu-idle-banner"' not in page

    warned = checked(notebook, [80] * 5 + [3] * 30, now=now + 30 * MINUTE)
    assert warned.counts["warned"] == 1 and len(warned.notices) == 1
    watch = GpuIdleWatch.objects.get(pk=notebook.pk)
    assert watch.act_at == watch.idle_since + 40 * MINUTE
    page = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/").content.decode()
    assert 'data-testid="gpu-idle-banner"' in page
    assert "Notebook explore: its GPUs have been below 15 % utilisation for 30 min." in page
    assert f'it stops at <time datetime="{watch.act_at.isoformat()}">' in page

    # The same samples on a job of a project that lets jobs run: warned only, never stopped.
    Project.objects.filter(pk=project.pk).update(gpu_idle_jobs="warn")
    job.project.refresh_from_db()
    checked(job, [80] * 5 + [3] * 60, now=now + 60 * MINUTE)
    job.refresh_from_db()
    assert job.state == "RUNNING" and not job.stop_requested
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    assert "left running (<strong>warned only</strong>)" in page
    assert "The project&#x27;s idle policy warns only: stop it if it is done." in page


def test_a_page_without_gpus_shows_no_card_and_user_text_is_escaped(
    owner_client: Client, project: Project, owner: Any
) -> None:
    Project.objects.filter(pk=project.pk).update(**POLICY)
    project.refresh_from_db()
    notebook = running_on_a_gpu(project, owner, "notebook", "<b>nb</b>")
    checked(notebook, [0] * 45, now=datetime.now(UTC).replace(second=0, microsecond=0))
    page = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/").content.decode()
    assert "Notebook &lt;b&gt;nb&lt;/b&gt;: its GPUs have been below 15 %" in page
    assert "<b>nb</b>" not in page
    cpu = Workload.objects.create(
        project=project,
        owner=owner,
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        name="cpu",
        image="img",
        kind="notebook",
        state="RUNNING",
    )
    page = owner_client.get(f"/p/alpha/notebooks/{cpu.pk}/").content.decode()
    assert 'data-testid="gpu-idle"' not in page


def test_the_webhook_tells_the_project_what_the_policy_did(
    project: Project, owner: Any, hook: Any, settings: Any
) -> None:
    settings.WEBHOOK_ALLOW_CIDRS = ["127.0.0.1/32"]
    url, received = hook
    Project.objects.filter(pk=project.pk).update(webhook_url=url, **POLICY)
    project.refresh_from_db()
    notebook = running_on_a_gpu(project, owner, "notebook", "explore")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    checked(notebook, [80] * 5 + [3] * 30, now=now)
    [notice] = GpuIdleNotice.objects.all()
    gpu_idle_webhook(notice.pk)
    [(headers, body)] = received
    assert headers["X-Ajuste-Event"] == "workload.gpu_idle"
    payload = json.loads(body)
    assert payload | {"acts_at": None, "idle_since": None} == {
        "event": "workload.gpu_idle",
        "state": "warning",
        "project": "alpha",
        "kind": "notebook",
        "id": str(notebook.pk),
        "name": "explore",
        "owner": "owner",
        "threshold_percent": 15,
        "idle_minutes": 30,
        "idle_since": None,
        "action": "stop",
        "acts_at": None,
        "url": f"{settings.SITE_URL}/p/alpha/notebooks/{notebook.pk}/",
    }
    assert payload["acts_at"] == (now + 10 * MINUTE).isoformat()
