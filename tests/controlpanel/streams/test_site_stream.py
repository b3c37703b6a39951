"""The site's stream (`/dashboard/events/`, what the all-projects dashboard and the capacity view
follow) over a real uvicorn and Redis: site admins only, any project's workload change told,
a new capacity reading told, and a site admin made an ordinary user loses it at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from controlpanel.dashboards.capacity import capacity_refresh
from controlpanel.engine.lifecycle import record_state
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from controlpanel.streams.site import NOT_ADMIN
from tests.controlpanel.streams.conftest import EventsServer, Reader, running_job, session_cookie
from tests.controlpanel.streams.test_project_stream import changes
from tests.fixtures.panel import logged_in

pytestmark = pytest.mark.django_db(transaction=True)

SITE = "/dashboard/events/"


def test_only_a_site_admin_may_follow_it(
    events_server: EventsServer,
    open_stream: Callable[..., Reader],
    project: Project,
    owner: Any,
    admin_user: Any,
) -> None:
    # A project manager who is not a site admin: refused as the pages refuse (not revealed).
    manager = events_server.get(SITE, headers=session_cookie(logged_in(owner)))
    assert (manager.status_code, manager.text) == (404, "No such page.")
    anonymous = events_server.get(SITE)
    assert (anonymous.status_code, anonymous.text) == (401, "Log in to follow this page.")
    # The manager's own project stream is theirs still; a site admin's site stream opens.
    assert (
        events_server.get(SITE + "x", headers=session_cookie(logged_in(owner))).status_code == 404
    )
    reader = open_stream(events_server.url + SITE, headers=session_cookie(logged_in(admin_user)))
    opened = reader.next()
    assert (opened.name, opened.data) == ("ready", {"site": True})


def test_any_projects_change_and_a_capacity_reading_are_told(
    events_server: EventsServer,
    open_stream: Callable[..., Reader],
    project: Project,
    other_project: Project,
    owner: Any,
    outsider: Any,
    admin_user: Any,
) -> None:
    reader = open_stream(events_server.url + SITE, headers=session_cookie(logged_in(admin_user)))
    assert reader.next().name == "ready"
    mine = running_job(project, owner, name="a")
    theirs = running_job(other_project, outsider, name="b")
    record_state(mine, JobState.FAILED, "exit code 1")
    record_state(theirs, JobState.DONE, "exit code 0")
    seen: dict[str, list[str]] = {}
    while len(seen) < 2:
        seen |= changes(reader)
    assert seen == {str(mine.pk): ["state"], str(theirs.pk): ["state"]}
    # The beat's capacity reading (the local backend's machine): the capacity view refreshes.
    assert capacity_refresh() is not None
    told = reader.next()
    while not told.data.get("capacity"):
        assert told.name == "changed", told
        told = reader.next()
    assert told.data["workloads"] == []


def test_a_site_admin_made_an_ordinary_user_loses_it(
    events_server: EventsServer,
    open_stream: Callable[..., Reader],
    project: Project,
    owner: Any,
    admin_user: Any,
) -> None:
    reader = open_stream(events_server.url + SITE, headers=session_cookie(logged_in(admin_user)))
    assert reader.next().name == "ready"
    admin_user.is_staff = False
    admin_user.save(update_fields=["is_staff"])
    end = reader.next(within=10)  # at once, not at the 300 s re-check
    assert (end.name, end.data) == ("end", {"reason": NOT_ADMIN})
    # Opening it again: refused as the pages are.
    refused = events_server.get(SITE, headers=session_cookie(logged_in(admin_user)))
    assert refused.status_code == 404
