"""Hostile text in every field a user fills (and in what a job prints), shown in Chromium on every
page that shows it: nothing executes, nothing is fetched, nothing breaks the strict CSP.

The payloads call `pwned()` (defined nowhere: a call would be a page error) or point at
`/pwned-*` on the panel itself (a fetch would show as a request); the page fixture fails the
test on any console error, a CSP violation included. Each page also must show the text as text."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.audit.log import record
from controlpanel.engine.models import JobEvent, JobLogLine
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.states import AppState
from storage import objects
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.jobs import project_bucket
from tests.fixtures.panel import PASSWORD

SCRIPT = "<script>pwned()</script>"
IMG = "<img src=/pwned-img onerror=pwned()>"
HTMX = '<div hx-get="/pwned-hx" hx-trigger="load">x</div>'
LINK = "javascript:pwned()"
CSS = "</style><style>*{background:url(/pwned-css)}</style>"
BIDI = "invoice\u202egnp.exe"
EVERY = (SCRIPT, IMG, HTMX, LINK, CSS, BIDI)
# What must never be in the DOM: markup the payloads would make if they were not text.
MADE = (
    "script:not([src])",  # the panel has no inline script: any is injected
    "[onerror]",
    "[hx-get^='/pwned']",  # the folder links carry the keys, quoted, in their hx-get
    "a[href^='javascript:']",
    "style",
    "img[src^='/pwned']",
    "svg[onload]",
)


def hostile_workloads(project: Project, owner: Any) -> tuple[Job, Notebook, App]:
    now = timezone.now()
    cpu = Flavor.objects.get(name="ai1-1-cpu")
    job = Job.objects.create(
        project=project,
        owner=owner,
        name=f"{IMG}{BIDI}",
        image="ajuste/finetune:1",
        command=["python", "-c", SCRIPT, HTMX],
        env={"NOTE": SCRIPT, "LINK": LINK, "CSS": CSS},
        labels={"team": HTMX, "x": IMG},
        flavor=cpu,
        state=JobState.FAILED,
        state_reason=f"exit code 1: {CSS}",
        started_at=now - timedelta(minutes=3),
        finished_at=now,
        exit_code=1,
        logs_archived=True,
        log_lines=len(EVERY) + 1,
    )
    JobEvent.objects.create(job=job, run=1, state=JobState.FAILED, reason=SCRIPT, at=now)
    for seq, text in enumerate([*EVERY, f"\x1b[31m{SCRIPT}\x1b[0m"], start=1):
        JobLogLine.objects.create(job=job, run=1, seq=seq, text=text)
    notebook = Notebook.objects.create(
        project=project,
        owner=owner,
        name=HTMX[:100],
        image="quay.io/jupyter/pytorch-notebook:cuda12-python-3.12",
        params={"image": "pytorch"},
        editor="jupyterlab",
        flavor=cpu,
        labels={"why": SCRIPT},
        state=NotebookState.STOPPED,
        state_reason=IMG,
    )
    app = App.objects.create(
        project=project,
        owner=owner,
        name=SCRIPT,
        image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": IMG},
        volumes=["b@LOCAL/m:/workspace/model:ro"],
        env={"A": HTMX},
        flavor=cpu,
        state=AppState.FAILED,
        state_reason=CSS,
    )
    return job, notebook, app


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_hostile_text_is_shown_as_text_everywhere(
    page: Any, live_server: Any, owner: Any, project: Project, panel_s3: Any, settings: Any
) -> None:
    settings.S3_CORS_ORIGINS = [live_server.url]
    settings.S3_PUBLIC_ENDPOINT_URL = ""
    owner.is_staff = True  # the admins' pages show every project's names too
    owner.first_name = SCRIPT
    owner.save()
    project.name = f"{IMG}{BIDI}"[:100]
    project.save()
    job, notebook, app = hostile_workloads(project, owner)
    bucket = project_bucket(project, panel_s3, name=f"hostile-{uuid.uuid4().hex[:8]}")
    svg = 'a"><svg onload=pwned()>.txt'
    for key in (f"{SCRIPT}.txt", svg, f"{BIDI}.txt"):  # '/' makes a folder: `<script>pwned()<`
        objects.put_object(panel_s3, bucket=bucket.name, key=key, data=b"x")

    # The audit log keeps names and details as they were given, and a username as it was typed.
    record(
        "workload.stop",
        actor=SCRIPT,
        project=project,
        target=("job", IMG),
        details={"name": f"{IMG}{BIDI}", HTMX: LINK, "reason": CSS, "command": [SCRIPT, HTMX]},
    )
    record("auth.login_failed", actor=None, project=None, target=None, details={"who": HTMX})

    fetched: list[str] = []
    page.on("request", lambda request: _note_pwned(request.url, fetched))
    base = live_server.url
    browser_login(page, base, "owner", PASSWORD)
    page.wait_for_url(f"{base}/p/alpha/")
    pages = {
        "project home": ("/p/alpha/", [IMG]),
        "jobs": ("/p/alpha/jobs/", [IMG]),
        "job": (f"/p/alpha/jobs/{job.pk}/", [IMG, SCRIPT, HTMX, CSS]),
        "job logs": (f"/p/alpha/jobs/{job.pk}/logs/", [SCRIPT, IMG, LINK]),
        "notebooks": ("/p/alpha/notebooks/", [HTMX]),
        "notebook": (f"/p/alpha/notebooks/{notebook.pk}/", [HTMX]),
        "apps": ("/p/alpha/apps/", [SCRIPT]),
        "app": (f"/p/alpha/apps/{app.pk}/", [SCRIPT]),
        "members": ("/p/alpha/members/", [SCRIPT]),
        "dashboard": ("/p/alpha/dashboard/?range=7d", [IMG]),
        "all dashboards": ("/dashboard/?range=7d", [IMG]),
        "bucket": (f"/p/alpha/buckets/LOCAL/{bucket.name}/", ["<script>pwned()<", svg]),
        "bucket folder": (
            f"/p/alpha/buckets/LOCAL/{bucket.name}/?prefix={_quote('<script>pwned()</')}",
            ["script>.txt"],
        ),
        "settings": ("/settings/", [IMG]),
        "people": ("/people/", [SCRIPT]),
        "audit log": ("/audit/", [f"job {IMG}", f"name={IMG}", f"{HTMX}={LINK}", CSS, SCRIPT]),
        "audit log filtered": (  # the filters echoed in their fields, as values
            f"/audit/?user={_quote(SCRIPT)}&project={_quote(HTMX)}",
            ["No event matches."],
        ),
        "audit log by user": (f"/audit/?user={_quote(SCRIPT)}", [SCRIPT, f"job {IMG}"]),
    }
    for name, (path, shown) in pages.items():
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        text = page.locator("body").inner_text()
        for payload in shown:
            assert payload in text, f"{name}: {payload!r} is not shown as text"
        for selector in MADE:
            assert page.locator(selector).count() == 0, f"{name}: {selector} made from user text"
        assert fetched == [], (name, fetched)
        assert console_errors(page) == [], (name, console_errors(page))
    # The last page, the audit log by user: the filter keeps the hostile username as its value.
    assert page.locator("#user").input_value() == SCRIPT


def _note_pwned(url: str, fetched: list[str]) -> None:
    """A fetch a payload made (`/pwned-*`): not a page whose query names a hostile key."""
    from urllib.parse import urlsplit

    if urlsplit(url).path.startswith("/pwned"):
        fetched.append(url)


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")
