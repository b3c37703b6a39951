"""Live log streams over a real ASGI server and Redis: a stored line is pushed to the stream, a
resumed stream loses and repeats nothing, the stream is the page's (another project's member
gets 404, a removed member's stream ends), and a user's open streams are bounded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from controlpanel.engine import logs
from controlpanel.engine.collector import _followed
from controlpanel.engine.lifecycle import record_state
from controlpanel.jobs.states import JobState
from controlpanel.projects.access import project_access
from controlpanel.projects.models import Membership, Project
from controlpanel.projects.services import member_remove
from controlpanel.streams.channels import MAX_LINES_PER_MESSAGE
from controlpanel.streams.feed import NO_ACCESS
from tests.controlpanel.streams.conftest import (
    EventsServer,
    Reader,
    running_job,
    session_cookie,
    start_events,
    store,
)
from tests.fixtures.panel import api_client_for, logged_in
from tests.fixtures.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
TRUNCATED = f"{logs.MARK} log truncated: the archive stopped before the end of the log"


def lines_of(events: list[Any]) -> list[tuple[str | None, int, str]]:
    return [(e.id, e.data["n"], e.data["text"]) for e in events if e.name == "line"]


def read_lines(reader: Reader, count: int) -> list[tuple[str | None, int, str]]:
    got: list[Any] = []
    while len(got) < count:
        event = reader.next()
        if event.name == "line":
            got.append(event)
    return lines_of(got)


def test_a_stored_line_appears_on_the_stream(
    events_server: EventsServer, open_stream: Callable[..., Reader], project: Project, owner: Any
) -> None:
    job = running_job(project, owner)
    store(job, "before the stream")
    path = f"/p/alpha/jobs/{job.pk}/events/"
    reader = open_stream(events_server.url + path, headers=session_cookie(logged_in(owner)))
    first = reader.next()
    assert (first.name, first.data["state"], first.data["final"]) == ("state", "RUNNING", False)
    assert read_lines(reader, 1) == [("1", 1, "before the stream")]
    # Followed: the collector reads the log every round, as for a polled page.
    wait_for(lambda: _followed({str(job.pk)}), 10, "the log to be marked followed")
    store(job, "\x1b[31mred <b>\x1b[0m", "two")
    got = [reader.next(), reader.next()]
    assert lines_of(got) == [("2", 2, "\x1b[31mred <b>\x1b[0m"), ("3", 3, "two")]
    assert got[0].data["html"] == '<span class="ansi-fg-r">red &lt;b&gt;</span>'
    assert got[0].data["time"] and got[0].data["event"] is False
    record_state(job, JobState.DONE, "exit code 0")
    state = reader.next()
    assert (state.name, state.data["state"], state.data["reason"]) == (
        "state",
        "DONE",
        "exit code 0",
    )
    assert state.data["final"] is True
    # An archive that reads nothing more says so in a last line, which comes before the end.
    logs.archive_logs(job_id=job.pk, max_rounds=0)
    assert read_lines(reader, 1) == [("4", 4, TRUNCATED)]
    end = reader.next()
    assert (end.name, end.data) == ("end", {"run": 1, "lines": 4})
    with pytest.raises(EOFError):
        reader.next()


def test_resume_loses_and_repeats_nothing(
    events_server: EventsServer, open_stream: Callable[..., Reader], project: Project, owner: Any
) -> None:
    job = running_job(project, owner)
    store(job, *(f"old {n}" for n in range(1, 6)))
    cookie = session_cookie(logged_in(owner))
    path = events_server.url + f"/p/alpha/jobs/{job.pk}/events/"
    resumed = open_stream(path, headers=cookie | {"Last-Event-ID": "3"})
    by_query = open_stream(path + "?after=4", headers=cookie)
    assert read_lines(resumed, 2) == [("4", 4, "old 4"), ("5", 5, "old 5")]
    assert read_lines(by_query, 1) == [("5", 5, "old 5")]
    # A chunk too big to carry is announced only; the streams read it from the rows.
    big = [f"big {n}" for n in range(MAX_LINES_PER_MESSAGE + 50)]
    store(job, *big)
    store(job, "after the big one")
    total = 5 + len(big) + 1
    for reader, after in ((resumed, 5), (by_query, 5)):
        got = read_lines(reader, total - after)
        assert [n for _, n, _ in got] == list(range(after + 1, total + 1))
        assert got[-1] == (str(total), total, "after the big one")
    # Nothing more was sent: the next event is the end, after the archive.
    record_state(job, JobState.DONE, "exit code 0")
    logs.archive_logs(job_id=job.pk, max_rounds=0)
    assert [e.name for e in resumed.until("end")] == ["state", "line", "end"]
    # A stream resumed at the end of a finished log ends at once with nothing repeated.
    done = open_stream(path, headers=cookie | {"Last-Event-ID": str(total + 1)})
    assert [e.name for e in done.until("end")] == ["state", "end"]


def test_the_stream_is_scoped_like_the_page(
    events_server: EventsServer, project: Project, owner: Any, outsider: Any
) -> None:
    job = running_job(project, owner)
    store(job, "secret line")
    page = f"/p/alpha/jobs/{job.pk}/events/"
    api = f"/api/v1/jobs/{job.pk}/logs/stream/"
    outsider_cookie = session_cookie(logged_in(outsider))
    for path in (page, api, f"/p/beta/jobs/{job.pk}/events/"):
        answer = events_server.get(path, headers=outsider_cookie)
        assert answer.status_code == 404 and "secret" not in answer.text
    # The owner's job named under another project (the outsider's) is no stream either.
    owner_cookie = session_cookie(logged_in(owner))
    assert (
        events_server.get(f"/p/beta/jobs/{job.pk}/events/", headers=owner_cookie).status_code == 404
    )
    anonymous = events_server.get(page)
    assert (anonymous.status_code, anonymous.text) == (401, "Log in to follow this log.")
    token = events_server.get(api, headers={"Authorization": "Bearer nope"})
    assert (token.status_code, token.headers["www-authenticate"]) == (401, "Bearer")
    bad = events_server.get(page + "?after=-1", headers=owner_cookie)
    assert (bad.status_code, bad.text) == (
        400,
        "after must be a whole number of 0 or more, not '-1'.",
    )
    run = events_server.get(page + "?run=2", headers=owner_cookie)
    assert (run.status_code, run.text) == (404, "This workload has no run 2: its runs are 1 to 1.")
    assert (
        events_server.get(f"/p/alpha/notebooks/{job.pk}/events/", headers=owner_cookie).status_code
        == 404
    )
    assert (
        events_server.get("/p/alpha/jobs/not-a-uuid/events/", headers=owner_cookie).status_code
        == 404
    )
    post = httpx_post(events_server, page, owner_cookie)
    assert post == (405, "A stream is read with GET.")


def httpx_post(server: EventsServer, path: str, headers: dict[str, str]) -> tuple[int, str]:
    import httpx

    answer = httpx.post(server.url + path, headers=headers, timeout=10)
    return answer.status_code, answer.text


def test_the_api_stream_takes_a_token(
    events_server: EventsServer,
    open_stream: Callable[..., Reader],
    project: Project,
    owner: Any,
    outsider: Any,
) -> None:
    job = running_job(project, owner)
    store(job, "one")
    bearer = {"Authorization": _bearer(owner)}
    reader = open_stream(events_server.url + f"/api/v1/jobs/{job.pk}/logs/stream/", headers=bearer)
    assert read_lines(reader, 1) == [("1", 1, "one")]
    wait_for(lambda: _followed({str(job.pk)}), 10, "the log to be marked followed")
    store(job, "two")
    assert read_lines(reader, 1) == [("2", 2, "two")]
    other = events_server.get(
        f"/api/v1/jobs/{job.pk}/logs/stream/", headers={"Authorization": _bearer(outsider)}
    )
    assert other.status_code == 404


def _bearer(user: Any) -> str:
    client = api_client_for(user)
    return str(client._credentials["HTTP_AUTHORIZATION"])


def test_a_removed_members_stream_ends(
    events_server: EventsServer,
    open_stream: Callable[..., Reader],
    project: Project,
    owner: Any,
    member: Any,
) -> None:
    job = running_job(project, owner)
    cookie = session_cookie(logged_in(member))
    path = events_server.url + f"/p/alpha/jobs/{job.pk}/events/"
    watching_owner = open_stream(path, headers=session_cookie(logged_in(owner)))
    watching_member = open_stream(path, headers=cookie)
    assert watching_member.next().name == "state"
    assert watching_owner.next().name == "state"
    member_remove(
        access=project_access(user=owner, slug="alpha"),
        membership=Membership.objects.get(project=project, user=member),
    )
    end = watching_member.next()
    assert (end.name, end.data["reason"]) == ("end", NO_ACCESS)
    with pytest.raises(EOFError):
        watching_member.next()
    # The owner's stream goes on, and the member cannot open another.
    store(job, "still here")
    assert read_lines(watching_owner, 1) == [("1", 1, "still here")]
    assert (
        events_server.get(path.removeprefix(events_server.url), headers=cookie).status_code == 404
    )


def test_a_users_open_streams_are_bounded(
    processes: Any, open_stream: Callable[..., Reader], project: Project, owner: Any
) -> None:
    server = start_events(processes, STREAMS_MAX_PER_USER="2")
    job = running_job(project, owner)
    cookie = session_cookie(logged_in(owner))
    path = f"/p/alpha/jobs/{job.pk}/events/"
    first = open_stream(server.url + path, headers=cookie)
    open_stream(server.url + path, headers=cookie)
    third = server.get(path, headers=cookie)
    assert third.status_code == 429
    assert third.text.startswith("You have 2 live streams open, the most one person may")
    first.response.close()  # a closed tab gives its slot back
    wait_for(
        lambda: server.get(path, headers=cookie).status_code == 200,
        10,
        "the closed stream's slot to come back",
        server.procs,
    )
