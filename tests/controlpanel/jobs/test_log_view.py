"""The log as people read it: progress events are drawn as the progress panel and hidden from
the log unless asked for; the job page, its htmx fragment, the plain log page and the API read
one page model (where a page ends, whether more will come, which lines are events); the API
shows the workload's progress, and lists jobs in a number of queries that does not grow with
the page."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from playwright.sync_api import expect
from rest_framework.test import APIClient

from controlpanel.engine.logs import _note_progress
from controlpanel.engine.models import JobLogLine
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.fixtures.browser import browser_login
from tests.fixtures.panel import PASSWORD

PLAIN = "[training] dataset: 24 examples"
EVENT = '{"event":"progress","v":1,"step":3,"max_steps":4,"loss":0.75,"eta_s":9.0}'
LINES = (PLAIN, EVENT, "epoch done")


def make_job(project: Project, owner: Any, lines: tuple[str, ...] = LINES, **fields: Any) -> Job:
    defaults = {"name": "job", "image": "x/y:1", "flavor": Flavor.objects.get(name="ai1-1-cpu")}
    job = Job.objects.create(project=project, owner=owner, **(defaults | fields))
    JobLogLine.objects.bulk_create(
        JobLogLine(job=job, run=job.run, seq=i, text=text) for i, text in enumerate(lines, 1)
    )
    _note_progress(job, lines)
    job.log_lines = len(lines)
    job.save()
    return job


def shown_lines(html: str) -> list[tuple[str, bool]]:
    """(text, is flagged as an event) of each log line in a page or fragment."""
    spans = re.findall(r'<span class="ln( ln-event)?" data-seq="\d+">(.*?)\n</span>', html)
    return [(text, bool(flag)) for flag, text in spans]


def test_progress_events_are_the_panel_and_hidden_from_the_log_by_default(
    owner_client: Client, project: Project, owner: Any
) -> None:
    """A custom job printing the protocol gets the panel too: its events are never lost."""
    job = make_job(project, owner, state=JobState.RUNNING, launched_run=1)
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    escaped = EVENT.replace('"', "&quot;")
    assert shown_lines(page) == [(PLAIN, False), (escaped, True), ("epoch done", False)]
    # Hidden by CSS unless the box is ticked: one click, and lines appended later obey it too.
    assert 'class="log-events" data-testid="show-events"> Show progress events' in page
    panel = page[page.index('data-testid="job-progress"') :]
    assert "step 3 of 4" in panel and 'value="75"' in panel and "loss 0.7500" in panel
    css = Path(str(finders.find("css/app.css"))).read_text()
    # Only where the toggle is (job logs): a notebook page has none and hides nothing.
    rule = ".logs:has(.log-events):not(:has(.log-events:checked)) .ln-event { display: none; }"
    assert rule in css
    fragment = owner_client.get(
        f"/p/alpha/jobs/{job.pk}/logs/?after=1", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert shown_lines(fragment) == [(escaped, True), ("epoch done", False)]
    plain_page = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/?after=0").content.decode()
    assert shown_lines(plain_page) == shown_lines(page) and "show-events" in plain_page


def _api_page(api: APIClient, job: Job, query: str = "") -> dict[str, Any]:
    response = api.get(f"/api/v1/jobs/{job.pk}/logs/?project=alpha{query}")
    assert response.status_code == 200, response.content
    return dict(response.json())


@pytest.mark.parametrize(
    ("fields", "query", "more"),
    [
        ({"state": JobState.RUNNING, "launched_run": 1}, "", True),
        ({"state": JobState.DONE, "launched_run": 1}, "", True),  # not archived yet
        ({"state": JobState.DONE, "launched_run": 1, "logs_archived": True}, "", False),
        ({"state": JobState.DONE, "launched_run": 1, "logs_archived": True}, "&after=1", False),
        ({"state": JobState.RUNNING, "run": 2, "launched_run": 2}, "&run=1", False),
    ],
)
def test_the_page_its_fragment_and_the_api_agree_on_a_page(
    owner_client: Client,
    owner_api: APIClient,
    project: Project,
    owner: Any,
    fields: dict[str, Any],
    query: str,
    more: bool,
) -> None:
    job = make_job(project, owner, **fields)
    if job.run == 2:  # the lines above are the current run's; give run 1 its own
        JobLogLine.objects.create(job=job, run=1, seq=1, text=EVENT)
    api = _api_page(owner_api, job, query)
    assert api["eof"] is not more
    url = f"/p/alpha/jobs/{job.pk}/logs/?{query.lstrip('&')}"
    fragment = owner_client.get(url, HTTP_HX_REQUEST="true").content.decode()
    plain = owner_client.get(url).content.decode()
    expected = [(x["text"].replace('"', "&quot;"), x["event"]) for x in api["lines"]]
    assert shown_lines(fragment) == shown_lines(plain) == expected
    assert [x["event"] for x in api["lines"]] == [x["text"] == EVENT for x in api["lines"]]
    # The poller asks again exactly while the API says more will come, from where it stopped.
    assert ('id="log-poller" hx-get' in fragment) is more
    assert (f"after={api['next']}" in fragment) is more
    assert ('href="?run=' in plain) is more
    if not query:  # the job page shows the current run the same way
        page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
        assert ('id="log-poller" hx-get' in page) is more
        assert shown_lines(page) == expected


def test_the_plain_log_page_refuses_a_run_the_job_never_had(
    owner_client: Client, outsider_client: Client, project: Project, owner: Any
) -> None:
    job = make_job(project, owner, state=JobState.DONE, launched_run=1, logs_archived=True)
    missing = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/?run=3")
    assert missing.status_code == 404 and b"runs are 1 to 1" in missing.content
    assert outsider_client.get(f"/p/alpha/jobs/{job.pk}/logs/?run=1").status_code == 404


def test_the_api_shows_the_stored_progress_checked_again(
    owner_api: APIClient, project: Project, owner: Any
) -> None:
    """A row written before a rule (here a NaN-free but ill-typed value) reads back clean."""
    job = make_job(project, owner, state=JobState.RUNNING, launched_run=1)
    Job.objects.filter(pk=job.pk).update(
        progress=job.progress | {"step": "3", "message": 5, "extra": "x"}
    )
    progress = owner_api.get(f"/api/v1/jobs/{job.pk}/?project=alpha").json()["progress"]
    assert progress == {
        "event": "progress",
        "last_event": "progress",
        "v": 1,
        "max_steps": 4,
        "loss": 0.75,
        "eta_s": 9.0,
    }


def _count_list_queries(api: APIClient) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = api.get("/api/v1/jobs/?project=alpha")
    assert response.status_code == 200
    return len(queries.captured_queries)


def test_the_api_list_costs_the_same_queries_for_2_jobs_or_12(
    owner_api: APIClient, project: Project, owner: Any
) -> None:
    for i in range(2):
        make_job(project, owner, name=f"a{i}")
    _count_list_queries(owner_api)  # the token's first use of the day is written once
    few = _count_list_queries(owner_api)
    for i in range(10):
        make_job(project, owner, name=f"b{i}")
    assert _count_list_queries(owner_api) == few


def test_the_page_and_the_api_read_the_same_filters(
    owner_client: Client, owner_api: APIClient, project: Project, owner: Any
) -> None:
    for name in ("charlie", "alpha-run", "bravo"):
        make_job(project, owner, name=name, lines=())
    listed = owner_api.get("/api/v1/jobs/?project=alpha&sort=name").json()["results"]
    names = [job["name"] for job in listed]
    assert names == ["alpha-run", "bravo", "charlie"]
    page = owner_client.get("/p/alpha/jobs/?sort=name").content.decode()
    assert [page.index(n) for n in names] == sorted(page.index(n) for n in names)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_one_click_shows_the_events_in_the_log_appended_ones_too(
    page: Any, live_server: Any, owner: Any, project: Project
) -> None:
    job = make_job(project, owner, state=JobState.RUNNING, launched_run=1)
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/jobs/{job.pk}/")
    lines = page.locator("#log-lines .ln")
    expect(lines.filter(has_text="epoch done")).to_be_visible()
    expect(page.locator("#log-lines .ln-event")).to_be_hidden()
    expect(page.locator("[data-testid=job-progress] progress")).to_have_attribute("value", "75")
    # The poller appends a line for people and an event: only the first shows.
    later = EVENT.replace('"step":3', '"step":4')
    JobLogLine.objects.create(job=job, run=1, seq=4, text="saved a checkpoint")
    JobLogLine.objects.create(job=job, run=1, seq=5, text=later)
    Job.objects.filter(pk=job.pk).update(log_lines=5)
    expect(lines.filter(has_text="saved a checkpoint")).to_be_visible()
    expect(page.locator("#log-lines .ln-event")).to_have_count(2)
    expect(page.locator("#log-lines .ln-event").nth(1)).to_be_hidden()
    page.get_by_label("Show progress events").check()  # one click, no reload
    expect(page.locator("#log-lines .ln-event").nth(0)).to_be_visible()
    expect(page.locator("#log-lines .ln-event").nth(1)).to_be_visible()
    page.get_by_label("Show progress events").uncheck()
    expect(page.locator("#log-lines .ln-event").nth(1)).to_be_hidden()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_pollers_ask_nothing_while_the_tab_is_hidden(
    page: Any, live_server: Any, owner: Any, project: Project
) -> None:
    """Without evaluated code (the CSP and htmx's allowEval refuse it): no console error."""
    job = make_job(project, owner, state=JobState.RUNNING, launched_run=1)
    page.add_init_script(  # a tab that can be told to look hidden
        "Object.defineProperty(document, 'visibilityState',"
        " {get: () => window.__seen || 'visible'})"
    )
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/jobs/{job.pk}/")
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.wait_for_timeout(1500)
    assert any("/logs/" in url for url in asked) and any("/status/" in url for url in asked)
    page.evaluate("window.__seen = 'hidden'; document.dispatchEvent(new Event('visibilitychange'))")
    page.wait_for_timeout(300)  # a request already under way may still finish
    asked.clear()
    page.wait_for_timeout(2000)
    assert asked == []
    page.evaluate(
        "window.__seen = 'visible'; document.dispatchEvent(new Event('visibilitychange'))"
    )
    page.wait_for_timeout(1000)
    assert any("/logs/" in url for url in asked)
