"""The logout rule of stream revocation at the HTTP layer: signing out with the panel's own
form (POST /logout/, through its URL, view and middleware) ends the API log stream
that session opened (the session-cookie route of /api/v1/jobs/<id>/logs/stream/) at once, while
the same user's token stream goes on. test_stream_revoke covers the page and project streams
with the test client's logout(); both rely on the user_logged_out receiver
(streams/receivers.py): without it a stream would run on to its periodic check (300 s)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse

from controlpanel.projects.models import Project
from controlpanel.streams.viewer import LOGGED_OUT
from tests.controlpanel.streams.conftest import (
    EventsServer,
    Reader,
    running_job,
    session_cookie,
    store,
)
from tests.fixtures.panel import api_client_for, logged_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_signing_out_ends_the_sessions_api_stream_and_not_the_tokens(
    events_server: EventsServer, open_stream: Callable[..., Reader], project: Project, owner: Any
) -> None:
    job = running_job(project, owner)
    store(job, "before")
    browser = logged_in(owner)
    cookie = session_cookie(browser)
    path = f"/api/v1/jobs/{job.pk}/logs/stream/"
    bearer = {"Authorization": str(api_client_for(owner)._credentials["HTTP_AUTHORIZATION"])}
    by_session = open_stream(events_server.url + path, headers=cookie)
    by_token = open_stream(events_server.url + path, headers=bearer)
    for reader in (by_session, by_token):
        assert reader.until("line")[-1].data["text"] == "before"  # subscribed

    answer = browser.post(reverse("logout"))
    assert answer.status_code == 302, answer

    event = by_session.next(within=20)
    while event.name == "state":  # the stream's opening state may still be ahead of the end
        event = by_session.next(within=20)
    assert (event.name, event.data.get("reason")) == ("end", LOGGED_OUT), event
    with pytest.raises(EOFError):
        by_session.next()
    # The token is no session: its stream still carries the next line.
    store(job, "after")
    line = by_token.until("line")[-1]
    assert (line.id, line.data["text"]) == ("2", "after")
    # The signed-out cookie opens nothing more.
    assert events_server.get(path, headers=cookie).status_code == 401
