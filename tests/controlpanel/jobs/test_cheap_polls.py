"""The job page's pollers cost little while nothing changes: the log poll and the status poll
answer 204 with no body (htmx swaps nothing and asks again) when the page already shows what
they would render, and the new content as soon as something changed."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlpanel.engine.models import JobLogLine
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.controlpanel.jobs.test_log_view import make_job, shown_lines

HTMX = {"HTTP_HX_REQUEST": "true"}


def _poll_url(html: str, element: str) -> str:
    found = re.search(rf'id="{element}"[^>]* hx-get="([^"]+)"', html)
    assert found, f"no polling #{element} in the page"
    return found.group(1).replace("&amp;", "&")


def test_the_log_poll_is_204_until_a_line_comes(
    owner_client: Client, outsider_client: Client, client: Client, project: Project, owner: Any
) -> None:
    job = make_job(project, owner, state=JobState.RUNNING, launched_run=1)
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    poll = _poll_url(page, "log-poller")
    assert poll.endswith("?run=1&after=3")
    idle = owner_client.get(poll, **HTMX)
    assert idle.status_code == 204 and idle.content == b""
    JobLogLine.objects.create(job=job, run=1, seq=4, text="<b>step 4</b>")
    fresh = owner_client.get(poll, **HTMX)
    assert fresh.status_code == 200
    fragment = fresh.content.decode()
    assert shown_lines(fragment) == [("&lt;b&gt;step 4&lt;/b&gt;", False)]
    assert _poll_url(fragment, "log-poller").endswith("?run=1&after=4")
    # Only the poller's own question is shortened: the plain page and a poll without its run
    # (an old page's) are answered whole.
    assert owner_client.get(poll.replace("after=3", "after=4")).status_code == 200
    assert owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/?after=4", **HTMX).status_code == 200
    # The end of the log is said, never a 204: the poller stops.
    job.state, job.logs_archived = JobState.DONE, True
    job.save()
    ended = owner_client.get(poll.replace("after=3", "after=4"), **HTMX)
    assert ended.status_code == 200 and 'data-testid="log-end"' in ended.content.decode()
    # Nobody else learns even that much.
    assert outsider_client.get(poll, **HTMX).status_code == 404
    assert client.get(poll, **HTMX).status_code in (302, 401, 403)


def test_the_status_poll_is_204_while_the_page_shows_the_same(
    owner_client: Client, outsider_client: Client, client: Client, project: Project, owner: Any
) -> None:
    job = make_job(project, owner, state=JobState.RUNNING, launched_run=1)
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    poll = _poll_url(page, "job-status")
    assert "?v=" in poll
    same = owner_client.get(poll, **HTMX)
    assert same.status_code == 204 and same.content == b""
    # A step of the fine-tune (progress), then a state change: each shown at the next poll.
    job.progress = job.progress | {"step": 4, "max_steps": 4}
    job.save()
    moved = owner_client.get(poll, **HTMX)
    assert moved.status_code == 200 and "step 4 of 4" in moved.content.decode()
    newer = _poll_url(moved.content.decode(), "job-status")
    assert newer != poll and owner_client.get(newer, **HTMX).status_code == 204
    job.state, job.state_reason = JobState.FAILED, "exit code 3 <script>"
    job.save()
    ended = owner_client.get(newer, **HTMX).content.decode()
    assert 'data-testid="job-state">FAILED' in ended and "exit code 3 &lt;script&gt;" in ended
    assert "hx-get" not in ended.split('id="job-status"')[1].split(">")[0]  # polling stops
    # Without a version (or with a stale one) the block is rendered.
    assert owner_client.get(poll.split("?")[0], **HTMX).status_code == 200
    assert outsider_client.get(poll, **HTMX).status_code == 404
    assert client.get(poll, **HTMX).status_code in (302, 401, 403)


def test_an_unchanged_status_costs_one_read_of_the_job(
    owner_client: Client, project: Project, owner: Any
) -> None:
    job = make_job(project, owner, state=JobState.RUNNING, launched_run=1)
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    poll = _poll_url(page, "job-status")
    with CaptureQueriesContext(connection) as queries:
        assert owner_client.get(poll, **HTMX).status_code == 204
    touched = [q["sql"] for q in queries.captured_queries if "workloads_" in q["sql"]]
    assert len(touched) == 1 and "workloads_joblogline" not in touched[0], touched


def test_a_waiting_jobs_status_follows_its_place_in_the_queue(
    owner_client: Client, project: Project, owner: Any
) -> None:
    now = timezone.now()
    first = make_job(project, owner, (), state=JobState.QUEUED, queued_at=now - timedelta(2))
    second = make_job(project, owner, (), state=JobState.QUEUED, queued_at=now - timedelta(1))
    page = owner_client.get(f"/p/alpha/jobs/{second.pk}/").content.decode()
    assert "position 2 in the queue" in page
    poll = _poll_url(page, "job-status")
    assert owner_client.get(poll, **HTMX).status_code == 204
    first.state, first.admitted_at = JobState.RUNNING, now
    first.save()
    moved = owner_client.get(poll, **HTMX)
    assert moved.status_code == 200 and "position 1 in the queue" in moved.content.decode()
