"""The ticket exchange: Open on the panel issues a one-time ticket for one user, one workload and
its host; the host's `/_ajuste/ticket` redeems it once and sets the host's own cookie, which
names the ticket's row (signed, salted with the host: a cookie copied to another host is
nothing there). The raw ticket travels once, in a redirect; only its SHA-256 is stored."""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core import signing
from django.utils import timezone

from controlpanel.usercontent.hosts import ContentHost
from controlpanel.usercontent.models import ContentTicket

TICKET_PATH = "/_ajuste/ticket"
# A path on the content host, never another host's: `//x` and `/\x` are read as hosts by
# browsers, and control characters split headers.
SAFE_PATH = re.compile(r"^/(?![/\\])[^\x00-\x20\x7f\\]*$")


def cookie_name() -> str:
    """`__Host-` on https: the browser then refuses the cookie from any other host, any path
    but `/` and any Domain attribute, so no sibling subdomain can plant or shadow it."""
    return "__Host-ajuste-content" if settings.HTTPS else "ajuste-content"


def safe_path(path: str, default: str) -> str:
    return path if len(path) <= 2000 and SAFE_PATH.match(path) else default


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def ticket_issue(
    *, user: Any, session_key: str, kind: str, host: ContentHost, next_path: str
) -> str:
    """The URL that redeems a new ticket on the workload's host (then lands on `next_path`).
    The user's rows older than a content session are dropped here: they open nothing."""
    raw = secrets.token_urlsafe(32)
    now = timezone.now()
    ContentTicket.objects.filter(
        user=user, created_at__lt=now - timedelta(seconds=settings.USER_CONTENT_SESSION_SECONDS)
    ).delete()
    ContentTicket.objects.create(
        digest=_digest(raw),
        user=user,
        session_key=session_key,
        kind=kind,
        workload_id=host.workload_id,
        label=host.label,
        next_path=next_path,
        expires_at=now + timedelta(seconds=settings.USER_CONTENT_TICKET_SECONDS),
    )
    return f"{host.origin}{TICKET_PATH}?{urlencode({'ticket': raw})}"


def ticket_redeem(*, raw: str, host: ContentHost) -> ContentTicket | None:
    """The ticket's row, marked used, when `raw` is a ticket for this host that has not
    expired nor been used; else None. One conditional UPDATE: two redeems of one ticket
    racing each other, one wins."""
    if not raw or len(raw) > 100:
        return None
    now = timezone.now()
    rows = ContentTicket.objects.filter(
        digest=_digest(raw), label=host.label, redeemed_at=None, expires_at__gt=now
    )
    if rows.update(redeemed_at=now) != 1:
        return None
    return ContentTicket.objects.select_related("user").get(digest=_digest(raw))


def _signer(host: ContentHost) -> signing.TimestampSigner:
    return signing.TimestampSigner(salt=f"ajuste.usercontent:{host.label}")


def cookie_value(ticket: ContentTicket, host: ContentHost) -> str:
    return _signer(host).sign(str(ticket.pk))


def ticket_of_cookie(value: str, host: ContentHost) -> ContentTicket | None:
    """The redeemed ticket a content cookie names, for this host, within its lifetime."""
    try:
        pk = _signer(host).unsign(value, max_age=settings.USER_CONTENT_SESSION_SECONDS)
        key = uuid.UUID(pk)
    except (signing.BadSignature, ValueError):
        return None
    return (
        ContentTicket.objects.select_related("user")
        .filter(pk=key, label=host.label, redeemed_at__isnull=False)
        .first()
    )
