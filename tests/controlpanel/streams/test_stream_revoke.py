"""An open stream ends at once when its viewer logs out (that session's streams only), is
deactivated (every stream, tokens' too) or loses the project at an SSO sign-in; and, with no
message at all, at its next periodic check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from controlpanel.accounts.oidc_settings import parse_group_mapping
from controlpanel.accounts.people import user_deactivate
from controlpanel.accounts.sso_groups import group_mapping_apply
from controlpanel.engine.lifecycle import record_state
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Membership, Project
from controlpanel.streams.viewer import DEACTIVATED, LOGGED_OUT, NO_ACCESS
from tests.controlpanel.streams.conftest import (
    EventsServer,
    Reader,
    running_job,
    session_cookie,
    start_events,
)
from tests.fixtures.panel import UserFactory, api_client_for, logged_in

pytestmark = pytest.mark.django_db(transaction=True)


def ends_with(reader: Reader, reason: str) -> None:
    """The stream's next events end it, saying `reason`; then it is closed."""
    while True:
        event = reader.next()
        if event.name == "end":
            assert event.data["reason"] == reason, event
            break
        assert event.name in ("state", "ready", "changed"), event
    with pytest.raises(EOFError):
        reader.next()


def opened(open_stream: Callable[..., Reader], url: str, headers: dict[str, str]) -> Reader:
    reader = open_stream(url, headers=headers)
    assert reader.next().name in ("ready", "state")  # subscribed: what follows is heard
    return reader


def test_a_logout_ends_that_sessions_streams_only(
    events_server: EventsServer, open_stream: Callable[..., Reader], project: Project, owner: Any
) -> None:
    job = running_job(project, owner)
    leaving, staying = logged_in(owner), logged_in(owner)
    url, cookie = events_server.url, session_cookie(leaving)
    page = opened(open_stream, f"{url}/p/alpha/events/", cookie)
    log = opened(open_stream, f"{url}/p/alpha/jobs/{job.pk}/events/", cookie)
    other = opened(open_stream, f"{url}/p/alpha/events/", session_cookie(staying))
    leaving.logout()
    ends_with(page, LOGGED_OUT)
    ends_with(log, LOGGED_OUT)
    # The other session's stream goes on, and the logged-out cookie opens nothing.
    record_state(job, JobState.DONE, "exit code 0")
    assert other.next().name == "changed"
    again = events_server.get("/p/alpha/events/", headers=cookie)
    assert again.status_code == 401


def test_a_deactivation_ends_every_stream_of_the_user(
    events_server: EventsServer,
    open_stream: Callable[..., Reader],
    project: Project,
    owner: Any,
    member: Any,
    admin_user: Any,
) -> None:
    job = running_job(project, owner)
    url = events_server.url
    bearer = {"Authorization": str(api_client_for(member)._credentials["HTTP_AUTHORIZATION"])}
    page = opened(open_stream, f"{url}/p/alpha/events/", session_cookie(logged_in(member)))
    api = opened(open_stream, f"{url}/api/v1/jobs/{job.pk}/logs/stream/", bearer)
    owners = opened(open_stream, f"{url}/p/alpha/events/", session_cookie(logged_in(owner)))
    user_deactivate(by=admin_user, user=member)
    ends_with(page, DEACTIVATED)
    ends_with(api, DEACTIVATED)
    record_state(job, JobState.DONE, "exit code 0")
    assert owners.next().name == "changed"  # another user's stream goes on


def test_losing_the_project_at_an_sso_sign_in_ends_its_streams(
    events_server: EventsServer,
    open_stream: Callable[..., Reader],
    project: Project,
    other_project: Project,
    owner: Any,
    settings: Any,
) -> None:
    settings.OIDC_GROUP_MAPPING = parse_group_mapping("team=alpha:member,all=beta:member")
    ann = UserFactory(username="ann")
    group_mapping_apply(user=ann, groups=["team", "all"])
    job = running_job(project, owner)
    cookie = session_cookie(logged_in(ann))
    url = events_server.url
    page = opened(open_stream, f"{url}/p/alpha/events/", cookie)
    log = opened(open_stream, f"{url}/p/alpha/jobs/{job.pk}/events/", cookie)
    kept = opened(open_stream, f"{url}/p/beta/events/", cookie)
    group_mapping_apply(user=ann, groups=["all"])  # the provider no longer says "team"
    assert not Membership.objects.filter(user=ann, project=project).exists()
    ends_with(page, NO_ACCESS)
    ends_with(log, NO_ACCESS)
    # Beta's stream goes on: still a member there.
    mine = running_job(other_project, ann, name="mine")
    record_state(mine, JobState.DONE, "exit code 0")
    assert kept.next().name == "changed"


def test_with_no_message_the_periodic_check_ends_it(
    processes: Any, open_stream: Callable[..., Reader], project: Project, member: Any
) -> None:
    """A removal no message told of (a row deleted by hand, a lost message): the stream asks
    again every STREAMS_RECHECK_SECONDS."""
    server = start_events(processes, STREAMS_RECHECK_SECONDS="1")
    reader = opened(open_stream, f"{server.url}/p/alpha/events/", session_cookie(logged_in(member)))
    Membership.objects.filter(user=member, project=project).delete()  # no message sent
    ends_with(reader, NO_ACCESS)
