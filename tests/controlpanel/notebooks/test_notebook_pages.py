"""Notebook pages with the Django test client: the form (every problem at once beside its
field, nothing stored; editors the image or this machine cannot serve offered disabled with
the reason), the list (state, flavor × units, editor, image, uptime, cost over every start,
Open, pagination, live polling), the detail page (timeline, idle clock with "Keep it running",
log, volumes linked to the bucket browser), the actions, Open, and user text escaped."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from controlpanel.buckets.models import Bucket
from controlpanel.engine.models import JobEvent, JobLogLine, JobRun
from controlpanel.engine.selectors import workload_cost_estimate
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.notebooks.usercontent import SERVED
from controlpanel.projects.models import Project, ProjectSecret
from controlpanel.usercontent.hosts import content_host
from controlpanel.usercontent.tickets import TICKET_PATH
from tests.fixtures.panel import logged_in

N = NotebookState
HTMX = {"HTTP_HX_REQUEST": "true"}
EVIL = "<script>alert(1)</script>"
SCREENSHOTS = Path(__file__).resolve().parents[3] / "var" / "screenshots"


def make_notebook(project: Project, owner: Any, **fields: Any) -> Notebook:
    """A notebook row (no backend: the pages read rows only)."""
    defaults: dict[str, Any] = {
        "name": "explore",
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-python-3.12",
        "params": {"image": "pytorch"},
        "editor": "jupyterlab",
        "flavor": Flavor.objects.get(name="ai1-1-cpu"),
        "gpu": 2,
        "state": N.STARTING,
        "state_reason": "created",
    }
    notebook = Notebook.objects.create(project=project, owner=owner, **(defaults | fields))
    JobEvent.objects.create(job=notebook, run=1, state=N.STARTING, reason="created")
    return notebook


def running(project: Project, owner: Any, **fields: Any) -> Notebook:
    now = timezone.now()
    return make_notebook(
        project,
        owner,
        **{
            "state": N.RUNNING,
            "state_reason": "serving",
            "admitted_at": now - timedelta(minutes=5),
            "launched_run": 1,
            "started_at": now - timedelta(minutes=4),
            "url": "http://127.0.0.1:8890/nb/alpha/x/?token=SERVER-TOKEN",
        }
        | fields,
    )


def form_data(**changes: str) -> dict[str, str]:
    return {
        "name": "explore",
        "image": "python",
        "editor": "jupyterlab",
        "flavor": "ai1-1-cpu",
        "gpu": "1",
        "volumes": "",
        "env": "",
        "labels": "",
    } | changes


# The form


def test_every_problem_shows_at_once_beside_its_field_and_nothing_is_stored(
    owner_client: Client, data_bucket: Bucket
) -> None:
    data = form_data(
        volumes=f"{data_bucket.name}@LOCAL/ok:/workspace/data\nnot a volume",
        env="TOKEN=secret:NOT_THERE",
        labels="team=ml",
        gpu="500",
    )
    response = owner_client.post("/p/alpha/notebooks/new/", data)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert errors["volumes"][0].startswith("Line 2: 'not a volume'")  # volumes.1, by its line
    assert "NOT_THERE" in errors["env"][0]  # env.TOKEN
    assert "at most" in errors["gpu"][0]
    assert set(errors) == {"volumes", "env", "gpu"}
    page = response.content.decode()
    assert page.count('class="field-error"') == 3
    assert Notebook.objects.count() == 0


def test_a_valid_form_starts_a_notebook_and_shows_its_page(
    owner_client: Client, owner: Any, data_bucket: Bucket, project: Project
) -> None:
    ProjectSecret.objects.create(project=project, name="HF_TOKEN", value="hidden-value")
    data = form_data(
        volumes=f"{data_bucket.name}@LOCAL/runs:/workspace/runs:rw",
        env="HF_TOKEN=secret:HF_TOKEN\nMODE=fast",
        labels="team=ml",
        image="pytorch",
    )
    response = owner_client.post("/p/alpha/notebooks/new/", data)
    notebook = Notebook.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/p/alpha/notebooks/{notebook.pk}/"
    assert (notebook.state, notebook.params["image"], notebook.owner) == (
        N.STARTING,
        "pytorch",
        owner,
    )
    assert notebook.env == {"HF_TOKEN": "secret:HF_TOKEN", "MODE": "fast"}
    assert notebook.volumes == [f"{data_bucket.name}@LOCAL/runs:/workspace/runs:rw"]
    page = owner_client.get(response["Location"]).content.decode()
    assert "Notebook explore is starting." in page
    assert 'data-testid="notebook-state">STARTING<' in page
    assert "PyTorch" in page and "JupyterLab" in page
    # the volume links to the bucket browser at its prefix; the secret's value shows nowhere
    assert f'href="/p/alpha/buckets/LOCAL/{data_bucket.name}/?prefix=runs%2F"' in page
    assert "hidden-value" not in page
    timeline = page.split('data-testid="timeline"')[1]
    assert "STARTING" in timeline and "created" in timeline


def test_an_editor_the_image_does_not_serve_is_disabled_with_the_reason(
    owner_client: Client, settings: Any
) -> None:
    settings.COMPUTE_BACKEND = "kubernetes"  # a cluster serves every editor its image has
    page = owner_client.get("/p/alpha/notebooks/new/").content.decode()
    assert 'value="jupyterlab" checked data-editor' in page
    assert 'value="vscode" disabled data-editor="vscode"> VS Code' in page
    assert "The Python image does not serve VS Code." in page
    # choosing the code-server image (the form's live validation) turns it around, and moves
    # the choice to the editor that image serves
    response = owner_client.post(
        "/p/alpha/notebooks/new/", form_data(image="vscode", validate="1"), **HTMX
    )
    fragment = response.content.decode()
    assert response.status_code == 200 and "<html" not in fragment
    assert 'value="vscode" checked data-editor="vscode"> VS Code' in fragment
    assert 'value="jupyterlab" disabled data-editor' in fragment
    assert "The VS Code (code-server) image does not serve JupyterLab." in fragment
    assert 'class="field-error"' not in fragment
    # and posting the now-impossible pair anyway says so beside the editor, storing nothing
    response = owner_client.post("/p/alpha/notebooks/new/", form_data(image="vscode"))
    assert response.status_code == 400
    assert "serves vscode, not jupyterlab" in response.context["form"].errors["editor"][0]
    assert Notebook.objects.count() == 0


def test_an_editor_this_machine_cannot_serve_is_disabled_with_the_reason(
    owner_client: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deploy.local import editors

    settings.COMPUTE_BACKEND = "local"
    monkeypatch.setattr(editors.shutil, "which", lambda name: None)  # no code-server here
    response = owner_client.post(
        "/p/alpha/notebooks/new/", form_data(image="vscode", editor="vscode", validate="1"), **HTMX
    )
    fragment = response.content.decode()
    assert 'value="vscode" checked disabled' in fragment
    assert "VS Code (code-server) is not installed on this machine" in fragment


def test_the_estimate_follows_the_flavor_and_units(owner_client: Client, gpu_machine: Any) -> None:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    response = owner_client.post(
        "/p/alpha/notebooks/new/", form_data(flavor=flavor.name, gpu="2", validate="1"), **HTMX
    )
    assert f"{flavor.current_price * 2:.2f}" in response.content.decode()
    assert response.context["estimate"] == (flavor.current_price * 2).quantize(Decimal("0.01"))


# The list


def test_the_list_shows_each_notebook_and_opens_only_running_ones(
    owner_client: Client, project: Project, owner: Any
) -> None:
    live = running(project, owner, name="live-one")
    make_notebook(project, owner, name="stopped-one", state=N.STOPPED, params={"image": "python"})
    page = owner_client.get("/p/alpha/notebooks/").content.decode()
    rows = {row.split("</tr>")[0] for row in page.split("<tr data-notebook=")[1:]}
    live_row = next(r for r in rows if "live-one" in r)
    stopped_row = next(r for r in rows if "stopped-one" in r)
    assert "RUNNING" in live_row and "ai1-1-cpu × 2" in live_row
    assert "JupyterLab" in live_row and "PyTorch" in live_row
    assert "4 min" in live_row  # uptime since started_at
    assert f'href="/p/alpha/notebooks/{live.pk}/open/"' in live_row
    assert "STOPPED" in stopped_row and "Python" in stopped_row and "/open/" not in stopped_row
    assert "SERVER-TOKEN" not in page  # the address (with its token) is only behind Open
    # nothing is changing: polled only slowly, for the running one's uptime and cost
    assert 'hx-trigger="every 30s' in page


def test_the_list_polls_fast_while_a_notebook_changes_and_not_at_all_when_none_runs(
    owner_client: Client, project: Project, owner: Any
) -> None:
    notebook = make_notebook(project, owner)
    assert 'hx-trigger="every 2s' in owner_client.get("/p/alpha/notebooks/").content.decode()
    Notebook.objects.filter(pk=notebook.pk).update(state=N.STOPPED)
    fragment = owner_client.get("/p/alpha/notebooks/", **HTMX).content.decode()
    # The table, and it polls no more: it is refreshed when the project's stream says a
    # notebook changed (static/js/streams.js), or when its tab shows again.
    trigger = 'hx-trigger="ajuste:changed from:body, visibilitychange from:document"'
    assert '<div id="notebook-table" hx-get=' in fragment and trigger in fragment
    assert 'data-pushed="/p/alpha/events/"' in fragment and "data-clock" not in fragment
    assert "every " not in fragment and "<html" not in fragment


def test_the_list_is_paginated(owner_client: Client, project: Project, owner: Any) -> None:
    for n in range(52):
        make_notebook(project, owner, name=f"nb-{n:02d}", state=N.STOPPED)
    first = owner_client.get("/p/alpha/notebooks/").content.decode()
    second = owner_client.get("/p/alpha/notebooks/?page=2").content.decode()
    assert "Page 1 of 2 (52 notebooks)" in first and "nb-51" in first and "nb-01" not in first
    assert "nb-01" in second and "nb-00" in second and "nb-51" not in second


def test_the_cost_so_far_counts_every_start(
    owner_client: Client, project: Project, owner: Any
) -> None:
    flavor = Flavor.objects.get(name="ai1-1-cpu")
    start = timezone.now() - timedelta(hours=3)
    FlavorPrice.objects.create(flavor=flavor, valid_from=start, price_per_hour=Decimal("6"))
    notebook = running(project, owner, run=2)
    now = timezone.now()
    for run, begin, end in ((1, 180, 170), (2, 30, None)):  # 10 min, then 30 min so far
        JobRun.objects.create(
            uid=f"run-{run}",
            job=notebook,
            project=project,
            run=run,
            flavor=flavor,
            units=2,
            started_at=now - timedelta(minutes=begin),
            finished_at=None if end is None else now - timedelta(minutes=end),
        )
    # 6/h per unit × 2 units = 0.20 a minute: 10 + 30 started minutes (31 once a second passes)
    cost = workload_cost_estimate(workload=notebook)
    assert cost in (Decimal("8.0000"), Decimal("8.2000"))
    assert f">{cost:.2f}<" in owner_client.get("/p/alpha/notebooks/").content.decode()
    detail = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/").content.decode()
    assert f"{cost} " in detail.split('data-testid="notebook-cost">')[1][:40]
    assert workload_cost_estimate(workload=make_notebook(project, owner)) is None  # not started


# The detail page, its fragments and actions


def test_the_idle_clock_warns_in_its_last_ten_minutes_and_keep_alive_resets_it(
    owner_client: Client, project: Project, owner: Any
) -> None:
    project.notebook_idle_minutes = 60
    project.save()
    calm = running(project, owner, last_activity_at=timezone.now() - timedelta(minutes=10))
    page = owner_client.get(f"/p/alpha/notebooks/{calm.pk}/").content.decode()
    idle = page.split('idle" data-testid="idle"')[0][-30:] + page.split('data-testid="idle"')[1]
    idle = idle.split("</div>")[0]
    assert "Stops in <strong>50 min</strong> if idle" in idle and "msg-warning" not in idle
    assert "Keep it running" in idle

    urgent = running(project, owner, last_activity_at=timezone.now() - timedelta(minutes=55))
    status = owner_client.get(f"/p/alpha/notebooks/{urgent.pk}/status/", **HTMX).content.decode()
    assert "<html" not in status and "msg msg-warning" in status and 'role="alert"' in status
    assert "Stops in <strong>5 min</strong> if idle" in status

    response = owner_client.post(f"/p/alpha/notebooks/{urgent.pk}/keep-alive/")
    assert response.status_code == 302
    page = owner_client.get(response["Location"]).content.decode()
    assert "Kept running" in page and "Stops in <strong>60 min</strong> if idle" in page


def test_stop_then_start_then_delete(owner_client: Client, project: Project, owner: Any) -> None:
    notebook = running(project, owner)
    url = f"/p/alpha/notebooks/{notebook.pk}/"
    assert owner_client.post(url + "stop/")["Location"] == url
    notebook.refresh_from_db()
    assert notebook.state == N.STOPPING and notebook.stop_requested
    # the sweep would finish the stop; here the row says it did
    Notebook.objects.filter(pk=notebook.pk).update(state=N.STOPPED)
    owner_client.post(url + "start/")
    notebook.refresh_from_db()
    assert (notebook.state, notebook.run) == (N.STARTING, 2)
    page = owner_client.get(url).content.decode()
    assert "Starting." in page and "started by owner" in page
    response = owner_client.post(url + "delete/")
    assert response["Location"] == "/p/alpha/notebooks/"
    notebook.refresh_from_db()
    assert notebook.state == N.DELETING  # its objects go first, then its row
    listing = owner_client.get("/p/alpha/notebooks/").content.decode()
    assert "Deleting the notebook" in listing and "DELETING" in listing


def test_refused_actions_are_said_as_messages(
    owner_client: Client, project: Project, owner: Any, member: Any
) -> None:
    notebook = running(project, owner)
    url = f"/p/alpha/notebooks/{notebook.pk}/"
    page = owner_client.post(url + "start/", follow=True).content.decode()
    assert "The notebook is RUNNING: stop it first." in page
    # a plain member may not stop someone else's notebook
    page = logged_in(member).post(url + "stop/", follow=True).content.decode()
    assert "Only the notebook&#x27;s owner or a project manager can do this." in page
    notebook.refresh_from_db()
    assert notebook.state == N.RUNNING
    assert owner_client.post(url + "explode/").status_code == 404
    assert owner_client.get(url + "stop/").status_code == 405


def test_a_notebook_never_started_is_deleted_at_once(
    owner_client: Client, project: Project, owner: Any
) -> None:
    notebook = make_notebook(project, owner)
    owner_client.post(f"/p/alpha/notebooks/{notebook.pk}/delete/")
    assert not Notebook.objects.filter(pk=notebook.pk).exists()
    # a page left open on it: its next poll takes the browser to the list
    status = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/status/", **HTMX)
    assert status.status_code == 404 and status["HX-Redirect"] == "/p/alpha/notebooks/"
    assert owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/status/").status_code == 404


def test_open_redirects_to_the_editor_only_while_running(
    owner_client: Client, project: Project, owner: Any
) -> None:
    notebook = running(project, owner)
    response = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/open/")
    # To the notebook's own host, through a one-time ticket (controlpanel/usercontent): the
    # server's token is in no address the browser sees.
    ticket = content_host(SERVED.prefix, notebook.pk).origin + TICKET_PATH + "?ticket="
    assert response.status_code == 302 and response["Location"].startswith(ticket)
    assert "SERVER-TOKEN" not in response["Location"]
    detail = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/").content.decode()
    assert "SERVER-TOKEN" not in detail and f"/notebooks/{notebook.pk}/open/" in detail
    Notebook.objects.filter(pk=notebook.pk).update(state=N.STOPPED, state_reason="stopped by owner")
    response = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/open/")
    assert response.status_code == 409
    page = response.content.decode()
    assert "explore is STOPPED (stopped by owner): it can be opened once it is RUNNING" in page
    assert "SERVER-TOKEN" not in page


def test_the_server_log_follows_like_a_jobs(
    owner_client: Client, project: Project, owner: Any
) -> None:
    notebook = running(project, owner)
    JobLogLine.objects.bulk_create(
        JobLogLine(job=notebook, run=1, seq=n, text=f"[I ServerApp] line {n} {EVIL}")
        for n in (1, 2)
    )
    Notebook.objects.filter(pk=notebook.pk).update(log_lines=2)
    base = f"/p/alpha/notebooks/{notebook.pk}/"
    page = owner_client.get(base).content.decode()
    assert "line 2 &lt;script&gt;" in page and EVIL not in page
    assert f'hx-get="{base}logs/?run=1&amp;after=2"' in page
    JobLogLine.objects.create(job=notebook, run=1, seq=3, text="line 3")
    fragment = owner_client.get(base + "logs/?run=1&after=2", **HTMX).content.decode()
    assert 'hx-swap-oob="beforeend:#log-lines"' in fragment and "line 3" in fragment
    assert "line 2" not in fragment and f'{base}logs/?run=1&amp;after=3"' in fragment
    download = owner_client.get(base + "logs/download/")
    assert (
        download["Content-Disposition"]
        == f'attachment; filename="notebook-{notebook.short_id}-run1.log"'
    )
    assert b"".join(download.streaming_content).decode().splitlines()[-1] == "line 3"


def test_user_text_is_escaped_in_pages_and_fragments(
    owner_client: Client, project: Project, owner: Any
) -> None:
    notebook = running(
        project, owner, name=EVIL, state_reason=EVIL, labels={"k": EVIL}, env={"A": EVIL}
    )
    base = f"/p/alpha/notebooks/{notebook.pk}/"
    answers = [
        owner_client.get("/p/alpha/notebooks/"),
        owner_client.get("/p/alpha/notebooks/", **HTMX),
        owner_client.get(base),
        owner_client.get(base + "status/", **HTMX),
    ]
    Notebook.objects.filter(pk=notebook.pk).update(state=N.STOPPED)
    answers.append(owner_client.get(base + "open/"))
    for response in answers:
        body = response.content.decode()
        assert EVIL not in body, response.request["PATH_INFO"]
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body, response.request["PATH_INFO"]


def test_the_nav_links_notebooks(owner_client: Client) -> None:
    page = owner_client.get("/p/alpha/").content.decode()
    assert '<a href="/p/alpha/notebooks/">Notebooks</a>' in page


@pytest.mark.browser
def test_create_through_the_form_in_chromium(
    page: Any, live_server: Any, owner: Any, project: Project, panel_s3: Any, settings: Any
) -> None:
    """The form under the strict CSP: the image moves the editor choice, the bucket picker
    writes a volume line, the estimate follows the flavor; submitted, the notebook is listed."""
    from playwright.sync_api import expect

    from tests.fixtures.browser import browser_login
    from tests.fixtures.jobs import project_bucket
    from tests.fixtures.panel import PASSWORD

    settings.COMPUTE_BACKEND = "kubernetes"  # every editor its image has can be served
    bucket = project_bucket(project, panel_s3, f"nb-pages-{uuid.uuid4().hex[:8]}").name
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/notebooks/new/")
    assert page.is_disabled("input[data-editor=vscode]")
    page.select_option("#id_image", "vscode")
    page.wait_for_selector("input[data-editor=vscode]:checked:not([disabled])")
    assert page.is_disabled("input[data-editor=jupyterlab]")
    page.select_option("#id_image", "pytorch")
    page.wait_for_selector("input[data-editor=jupyterlab]:checked:not([disabled])")
    page.fill(".volume-builder [data-part=prefix]", "notes")
    page.click("[data-action=add-volume]")
    assert page.input_value("#id_volumes").strip() == f"{bucket}@LOCAL/notes:/workspace/data:ro"
    page.select_option("#id_flavor", "h100-1-gpu")
    price = Flavor.objects.get(name="h100-1-gpu").current_price
    assert price is not None
    expect(page.locator("[data-testid=estimate] strong")).to_contain_text(f"{price:.2f}")
    expect(page.locator("label[for=id_gpu]")).to_contain_text("1 GPU each")
    page.fill("#id_name", "look <b>here</b>")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "notebook-form.png"), full_page=True)
    page.click("#notebook-form button[type=submit]")
    page.wait_for_url("**/notebooks/*-*/")
    assert page.inner_text("h1").startswith("look <b>here</b>")  # escaped, shown as text
    page.screenshot(path=str(SCREENSHOTS / "notebook-detail.png"), full_page=True)
    page.click("nav.crumbs a")
    row = page.locator("[data-testid=notebooks] tbody tr").first
    assert "look <b>here</b>" in row.inner_text() and "STARTING" in row.inner_text()
    assert "PyTorch" in row.inner_text() and "h100-1-gpu × 1" in row.inner_text()
    page.screenshot(path=str(SCREENSHOTS / "notebook-list.png"), full_page=False)
