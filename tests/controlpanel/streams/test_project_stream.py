"""A project's stream (`/p/<slug>/events/`, what its lists, dashboard and status blocks follow)
over a real uvicorn and Redis: a change of a workload of the project is told at once, a burst is
coalesced, another project's member gets nothing of it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from controlpanel.engine.lifecycle import record_state
from controlpanel.engine.services import workload_delete
from controlpanel.jobs.states import JobState
from controlpanel.projects.access import project_access
from controlpanel.projects.models import Project
from controlpanel.streams.project import COALESCE_S
from tests.controlpanel.streams.conftest import (
    EventsServer,
    Reader,
    running_job,
    session_cookie,
    store,
)
from tests.fixtures.jobs import submit
from tests.fixtures.panel import logged_in

pytestmark = pytest.mark.django_db(transaction=True)


def changes(reader: Reader, count: int = 1) -> dict[str, list[str]]:
    """What the next `changed` events say changed (workload id → what), `count` of them."""
    seen: dict[str, list[str]] = {}
    while count:
        event = reader.next()
        assert event.name == "changed", event
        for item in event.data["workloads"]:
            seen.setdefault(item["id"], []).extend(item["what"])
        count -= 1
    return seen


def test_a_change_of_the_projects_workloads_is_told(
    events_server: EventsServer,
    open_stream: Callable[..., Reader],
    project: Project,
    owner: Any,
    k8s_jobs: Any,
) -> None:
    reader = open_stream(
        events_server.url + "/p/alpha/events/", headers=session_cookie(logged_in(owner))
    )
    opened = reader.next()
    assert (opened.name, opened.data) == ("ready", {"project": "alpha"})
    job = running_job(project, owner)
    record_state(job, JobState.FAILED, "exit code 1")
    assert changes(reader) == {str(job.pk): ["state"]}
    # A progress line (the protocol's event) changes the list's bar: told; a plain line is not.
    time.sleep(COALESCE_S)
    store(job, "plain", '{"event": "progress", "step": 3, "total_steps": 10}')
    assert changes(reader) == {str(job.pk): ["progress"]}
    # A submission (a new row) and a deletion are told too.
    new = submit(project, owner, name="new")
    told = changes(reader)
    assert "new" in told[str(new.pk)]
    access = project_access(user=owner, slug="alpha")
    workload_delete(access=access, user=owner, workload=job)
    deleted = changes(reader)
    while "deleted" not in deleted.get(str(job.pk), []):  # its admission may be told first
        deleted = changes(reader)


def test_a_burst_is_coalesced_and_nothing_is_dropped(
    events_server: EventsServer, open_stream: Callable[..., Reader], project: Project, owner: Any
) -> None:
    reader = open_stream(
        events_server.url + "/p/alpha/events/", headers=session_cookie(logged_in(owner))
    )
    assert reader.next().name == "ready"
    jobs = [running_job(project, owner, name=f"j{n}") for n in range(6)]
    for job in jobs:
        record_state(job, JobState.DONE, "exit code 0")
    seen: dict[str, list[str]] = {}
    events = 0
    while len(seen) < len(jobs):
        seen |= changes(reader)
        events += 1
    assert set(seen) == {str(job.pk) for job in jobs}
    # Six changes within a few milliseconds: the first told at once, the rest in one more event.
    assert events <= 3, events


def test_another_projects_member_gets_nothing(
    events_server: EventsServer,
    open_stream: Callable[..., Reader],
    project: Project,
    other_project: Project,
    owner: Any,
    outsider: Any,
) -> None:
    outsider_cookie = session_cookie(logged_in(outsider))
    refused = events_server.get("/p/alpha/events/", headers=outsider_cookie)
    assert (refused.status_code, refused.text) == (404, "No such project.")
    anonymous = events_server.get("/p/alpha/events/")
    assert (anonymous.status_code, anonymous.text) == (401, "Log in to follow this page.")
    # The outsider's own project's stream says nothing of alpha's workloads.
    theirs = open_stream(events_server.url + "/p/beta/events/", headers=outsider_cookie)
    assert theirs.next().name == "ready"
    secret = running_job(project, owner, name="secret")
    record_state(secret, JobState.DONE, "exit code 0")
    own = running_job(other_project, outsider, name="mine")
    record_state(own, JobState.DONE, "exit code 0")
    told = changes(theirs)
    assert told == {str(own.pk): ["state"]}, told
