"""The ticket exchange's rules at the service level: a ticket is stored as its SHA-256 only,
opens once, for its own host, before it expires; the cookie it becomes is good on that host
alone and only while the panel session that opened it lives."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client
from django.utils import timezone

from controlpanel.usercontent.gate import cookie_user
from controlpanel.usercontent.hosts import content_host
from controlpanel.usercontent.models import ContentTicket
from controlpanel.usercontent.tickets import (
    cookie_value,
    safe_path,
    ticket_issue,
    ticket_of_cookie,
    ticket_redeem,
)

pytestmark = pytest.mark.django_db
NB = "5f0c1e2d3c4b4a59868796a5b4c3d2e1"
OTHER = "0123456789abcdef0123456789abcdef"


def session_for(user: Any) -> str:
    """A panel session of `user`'s, as logging in makes one."""
    client = Client()
    client.force_login(user)
    return str(client.session.session_key)


def issue(user: Any, label: str = NB, session: str = "") -> str:
    url = ticket_issue(
        user=user,
        session_key=session or session_for(user),
        kind="notebook",
        host=content_host("nb", label),
        next_path="/lab",
    )
    return parse_qs(urlsplit(url).query)["ticket"][0]


def test_a_ticket_is_kept_hashed_and_opens_once(owner: Any) -> None:
    raw = issue(owner)
    row = ContentTicket.objects.get()
    assert row.digest == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(ContentTicket.objects.values().get())
    assert ticket_redeem(raw=raw, host=content_host("nb", OTHER)) is None  # another host
    opened = ticket_redeem(raw=raw, host=content_host("nb", NB))
    assert opened is not None and opened.user == owner and opened.next_path == "/lab"
    assert ticket_redeem(raw=raw, host=content_host("nb", NB)) is None  # used


def test_an_expired_ticket_opens_nothing(owner: Any) -> None:
    raw = issue(owner)
    ContentTicket.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert ticket_redeem(raw=raw, host=content_host("nb", NB)) is None
    assert ContentTicket.objects.get().redeemed_at is None


def test_the_cookie_is_its_hosts_and_lives_with_the_panel_session(owner: Any) -> None:
    session = session_for(owner)
    host = content_host("nb", NB)
    ticket = ticket_redeem(raw=issue(owner, session=session), host=host)
    assert ticket is not None
    value = cookie_value(ticket, host)
    assert ticket_of_cookie(value, host) == ticket
    assert ticket_of_cookie(value, content_host("nb", OTHER)) is None
    assert ticket_of_cookie(value[:-1] + ("A" if value[-1] != "A" else "B"), host) is None
    assert cookie_user(value, host) == owner
    owner.set_password("a new one")  # a changed password ends its sessions
    owner.save()
    assert cookie_user(value, host) is None


def test_a_logged_out_or_deactivated_user_opens_nothing(owner: Any, member: Any) -> None:
    host = content_host("nb", NB)
    session = session_for(owner)
    ticket = ticket_redeem(raw=issue(owner, session=session), host=host)
    assert ticket is not None and cookie_user(cookie_value(ticket, host), host) == owner
    SessionStore(session).delete()
    assert cookie_user(cookie_value(ticket, host), host) is None
    other = ticket_redeem(raw=issue(member), host=host)
    assert other is not None and cookie_user(cookie_value(other, host), host) == member
    member.is_active = False
    member.save()
    assert cookie_user(cookie_value(other, host), host) is None


@pytest.mark.parametrize(
    ("path", "kept"),
    [
        ("/lab/tree/a.ipynb?x=1", True),
        ("//evil.example/", False),
        ("/\\evil.example/", False),
        ("https://evil.example/", False),
        ("/a\r\nSet-Cookie: x=1", False),
        ("/" + "a" * 2000, False),
        ("", False),
    ],
)
def test_a_ticket_lands_on_its_own_host_only(path: str, kept: bool) -> None:
    assert safe_path(path, "/home") == (path if kept else "/home")
