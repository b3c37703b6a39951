"""Chromium: the jobs list and the project's dashboard follow the project's stream, a notebook's
status block its log's stream, the all-projects dashboard the site's stream: a change shows
without a reload and without a poll."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from controlpanel.engine.lifecycle import record_state
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.states import JobState
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from tests.controlpanel.streams.conftest import EventsServer, running_job, start_events
from tests.fixtures.browser import browser_login
from tests.fixtures.panel import PASSWORD
from tests.fixtures.processes import Processes

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def streams_for(live_server: Any, settings: Any, processes: Callable[..., Processes]) -> Any:
    """The events server for the page's streams. A test names `processes` before `page`, so the
    tab closes before the server stops: stopped first, it cut the open project stream and the
    tab's console logged ERR_INCOMPLETE_CHUNKED_ENCODING, failing the page's teardown."""
    events = start_events(processes, STREAMS_ALLOWED_ORIGINS=live_server.url)
    settings.STREAMS_URL = events.url.replace("127.0.0.1", urlsplit(live_server.url).hostname)
    csp = copy.deepcopy(settings.CONTENT_SECURITY_POLICY)
    csp["DIRECTIVES"]["connect-src"].append(settings.STREAMS_URL)
    settings.CONTENT_SECURITY_POLICY = csp
    return events


def requests_to(page: Any, part: str) -> list[str]:
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if part in request.url else None)
    return asked


def test_the_jobs_list_shows_a_change_without_polling(
    processes: Callable[..., Processes],  # first: torn down after the page (see streams_for)
    page: Any,
    live_server: Any,
    settings: Any,
    owner: Any,
    project: Project,
) -> None:
    events: EventsServer = streams_for(live_server, settings, processes)
    job = running_job(project, owner, name="trainer")
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/jobs/")
    expect(page.locator("body")).to_have_attribute("data-pushed", "open")
    row = page.locator("tr", has_text="trainer")
    expect(row.locator(".badge").first).to_have_text("RUNNING")
    asked = requests_to(page, "/p/alpha/jobs/")
    page.wait_for_timeout(2500)  # a running job's list polled every 2 s before
    assert asked == [], asked
    record_state(job, JobState.FAILED, "exit code 3")
    expect(row.locator(".badge").first).to_have_text("FAILED")
    assert len(asked) == 1, asked  # the one fragment the change asked for
    # A new job of the project appears the same way.
    new = running_job(project, owner, name="second")
    record_state(new, JobState.DONE, "exit code 0")
    expect(page.locator("tr", has_text="second")).to_be_visible()
    assert events.procs.procs["events"].poll() is None


def test_a_notebooks_status_block_and_the_dashboard_follow_without_polling(
    processes: Callable[..., Processes],  # first: torn down after the page (see streams_for)
    page: Any,
    live_server: Any,
    settings: Any,
    owner: Any,
    project: Project,
) -> None:
    streams_for(live_server, settings, processes)
    notebook = Notebook.objects.create(
        project=project,
        owner=owner,
        name="lab",
        image="local",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=NotebookState.STARTING,
    )
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/notebooks/{notebook.pk}/")
    expect(page.locator("#log-poller")).to_have_attribute("data-stream", "open")
    asked = requests_to(page, "/status/")
    page.wait_for_timeout(2500)  # a starting notebook's block polled every 2 s before
    assert asked == [], asked
    record_state(notebook, NotebookState.RUNNING, "ready")
    expect(page.get_by_test_id("notebook-state")).to_have_text("RUNNING")
    assert len(asked) == 1, asked
    # The project's dashboard: its running count follows the same way.
    page.goto(f"{live_server.url}/p/alpha/dashboard/")
    expect(page.locator("body")).to_have_attribute("data-pushed", "open")
    running = page.get_by_test_id("running")
    expect(running).to_have_text("1")
    record_state(notebook, NotebookState.STOPPED, "stopped by owner")
    expect(running).to_have_text("0")


def test_the_all_projects_dashboard_follows_the_site_stream_without_polling(
    processes: Callable[..., Processes],  # first: torn down after the page (see streams_for)
    page: Any,
    live_server: Any,
    settings: Any,
    owner: Any,
    outsider: Any,
    project: Project,
    other_project: Project,
    admin_user: Any,
) -> None:
    """A site admin's all-projects dashboard: any project's change shows with the one fragment
    request it asks for, and no 30 s poll while the site's stream is open."""
    streams_for(live_server, settings, processes)
    first = running_job(project, owner, name="a")
    running_job(other_project, outsider, name="b")
    browser_login(page, live_server.url, "admin", PASSWORD)
    page.clock.install()  # the page's timers on a clock the test can run ahead
    page.goto(f"{live_server.url}/dashboard/")
    expect(page.locator("body")).to_have_attribute("data-pushed", "open")
    running = page.get_by_test_id("running")
    expect(running).to_have_text("2")
    asked = requests_to(page, "/dashboard/?")
    record_state(first, JobState.DONE, "exit code 0")
    expect(running).to_have_text("1")
    assert len(asked) == 1, asked  # the one fragment the change asked for
    page.clock.run_for(35_000)  # the dashboard's 30 s poll would come: none while streamed
    page.wait_for_timeout(500)
    assert len(asked) == 1, asked
