"""Chromium follows a log through its stream: a stored line shows without the page polling."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from controlpanel.engine import logs
from controlpanel.engine.lifecycle import record_state
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.controlpanel.streams.conftest import running_job, start_events, store
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.faults import free_port
from tests.fixtures.panel import PASSWORD
from tests.fixtures.processes import Processes


def allow_streams(settings: Any, url: str) -> None:
    """Pages stream from `url`, which their content security policy lets them reach."""
    settings.STREAMS_URL = url
    csp = copy.deepcopy(settings.CONTENT_SECURITY_POLICY)
    csp["DIRECTIVES"]["connect-src"].append(url)
    settings.CONTENT_SECURITY_POLICY = csp


def streamed_job_page(
    page: Any, live_server: Any, settings: Any, events: str, project: Project, owner: Any
) -> tuple[Any, list[str]]:
    """A running job with one stored line, its page open on the stream from `events`; the
    URLs the page asks for from then on."""
    # The page's host (cookies are per host, whatever the port), the events server's port.
    allow_streams(settings, events.replace("127.0.0.1", urlsplit(live_server.url).hostname))
    job = running_job(project, owner)
    store(job, "first line")
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/jobs/{job.pk}/")
    expect(page.locator("#log-poller")).to_have_attribute("data-stream", "open")
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    return job, asked


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_printed_line_shows_without_polling(
    page: Any,
    live_server: Any,
    settings: Any,
    processes: Callable[[dict[str, str]], Processes],
    owner: Any,
    project: Project,
) -> None:
    events = start_events(processes, STREAMS_ALLOWED_ORIGINS=live_server.url)
    job, asked = streamed_job_page(page, live_server, settings, events.url, project, owner)
    store(job, "pushed \x1b[32m<ok>\x1b[0m")
    pushed = page.locator("#log-lines .ln", has_text="pushed <ok>")
    expect(pushed).to_be_visible()
    expect(pushed).to_have_attribute("data-seq", "2")
    assert page.locator("#log-lines .ln").count() == 2
    assert [url for url in asked if "/logs/" in url or "/status/" in url] == []
    # A state change refreshes the status block by the push; the end of the log ends it.
    record_state(job, JobState.DONE, "exit code 0")
    expect(page.locator("#job-status")).to_have_attribute("data-state", "DONE")
    logs.archive_logs(job_id=job.pk, max_rounds=0)
    expect(page.get_by_test_id("log-end")).to_be_visible()
    assert [url for url in asked if "/logs/" in url] == []


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_without_an_events_server_the_page_polls(
    page: Any, live_server: Any, settings: Any, owner: Any, project: Project
) -> None:
    """A stream that cannot be opened (nothing listens there) leaves the poll in charge."""
    allow_streams(settings, f"http://127.0.0.1:{free_port()}")  # nothing listens: refused
    job = running_job(project, owner)
    store(job, "first line")
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/jobs/{job.pk}/")
    expect(page.locator("#log-lines .ln", has_text="first line")).to_be_visible()
    store(job, "polled line")
    expect(page.locator("#log-lines .ln", has_text="polled line")).to_be_visible()
    assert page.locator("#log-lines .ln").count() == 2
    assert page.locator("#log-poller").get_attribute("data-stream") is None
    # The one error the browser logs is the refused stream (cleared, or the fixture fails).
    errors = console_errors(page)
    assert len(errors) == 1 and "/events/?run=1&after=1" in errors[0], errors
    errors.clear()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_stream_survives_a_restart_of_the_events_server(
    page: Any,
    live_server: Any,
    settings: Any,
    processes: Callable[[dict[str, str]], Processes],
    owner: Any,
    project: Project,
) -> None:
    """An events pod killed mid-stream (a restart, a rollout): the browser reconnects by itself
    with Last-Event-ID to the one that replaces it and gets the lines stored meanwhile, each
    once, in order, without the page polling."""
    port = free_port()
    events = start_events(processes, port, STREAMS_ALLOWED_ORIGINS=live_server.url)
    job, asked = streamed_job_page(page, live_server, settings, events.url, project, owner)
    store(job, "before the restart")
    expect(page.locator("#log-lines .ln", has_text="before the restart")).to_be_visible()
    events.procs.kill("events")
    store(job, "while it was down")
    store(job, "also while it was down")
    start_events(processes, port, STREAMS_ALLOWED_ORIGINS=live_server.url)
    expect(page.locator("#log-lines .ln", has_text="also while it was down")).to_be_visible()
    store(job, "after the restart")
    expect(page.locator("#log-lines .ln", has_text="after the restart")).to_be_visible()
    lines = page.locator("#log-lines .ln")
    assert [lines.nth(i).get_attribute("data-seq") for i in range(lines.count())] == [
        "1", "2", "3", "4", "5"
    ]  # fmt: skip
    assert page.locator("#log-poller").get_attribute("data-stream") == "open"
    assert [url for url in asked if "/logs/" in url] == []
    # Back, the stream says the state again: the status block asks once (a state may have
    # changed while it was down), then nothing.
    assert len([url for url in asked if "/status/" in url]) <= 1, asked
    # The refused reconnections while it was down are the console's only errors.
    errors = console_errors(page)
    assert all("/events/" in error for error in errors), errors
    errors.clear()
