"""The one rule every request to a notebook's or app's host passes, wherever it is asked: by
the gateway's `auth_request` on a cluster (views.gateway_auth), by the panel's own proxy under
`make run` (middleware.py, tunnel.py).

Who the visitor is comes from the host's own cookie (tickets.py) and nothing else the panel
set: the cookie names a redeemed ticket, whose panel session must still be alive and still be
the same user's (logging out of the panel, changing one's password or being deactivated closes
every content host). The cookie counts only for requests made by the host's own pages, or for
a top-level navigation: every notebook and app shares one site (`*.<domain>`), so a page on
another workload's host could otherwise make the browser send it (SameSite=Lax lets same-site
requests carry it) and have the gateway add the editor's token to a request it forged.

The kind then decides (served.py): its rule for this user or this API token, and where its
server listens. The server gets the request without the content cookie and without the
caller's Authorization header (the kind's own, when it has one, instead)."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.contrib import auth
from django.urls import reverse

from controlpanel.usercontent import served as kinds
from controlpanel.usercontent.hosts import ContentHost, parse_host, scheme
from controlpanel.usercontent.tickets import cookie_name, safe_path, ticket_of_cookie

SAFE_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class Visit:
    """The request a verdict is about, as the gateway or the local proxy saw it."""

    host: str
    method: str = "GET"
    path: str = "/"
    cookie: str = ""
    authorization: str = ""
    origin: str = ""
    fetch_site: str = ""
    fetch_mode: str = ""
    fetch_dest: str = ""

    @classmethod
    def of(cls, headers: Any, *, host: str, method: str, path: str) -> Visit:
        """From a request's headers (Django's case-insensitive `request.headers`)."""
        return cls(
            host=host,
            method=method.upper(),
            path=path,
            cookie=headers.get("Cookie", ""),
            authorization=headers.get("Authorization", ""),
            origin=headers.get("Origin", ""),
            fetch_site=headers.get("Sec-Fetch-Site", "").lower(),
            fetch_mode=headers.get("Sec-Fetch-Mode", "").lower(),
            fetch_dest=headers.get("Sec-Fetch-Dest", "").lower(),
        )


@dataclass(frozen=True)
class Verdict:
    """200 with where to send the request and what to send, or 401/403 and why (`signin`:
    where a browser goes to sign in, for a 401 of a kind visited by people)."""

    status: int
    reason: str = ""
    address: str = ""
    authorization: str = ""
    cookie: str = ""
    cache_seconds: int = 0
    count: str = ""
    signin: str = ""
    browser: bool = True
    host: ContentHost | None = field(default=None, compare=False)


def gate_check(visit: Visit) -> Verdict:
    """The verdict on one request to a content host (see the module's docstring)."""
    host = parse_host(visit.host)
    served = kinds.by_prefix(host.prefix) if host else None
    if host is None or served is None:
        return Verdict(403, "No notebook or app is served at this address.")
    workload = served.find(host.workload_id)
    if workload is None:
        return Verdict(403, f"No such {served.noun}.", browser=served.browser)
    ours, cookie = split_cookies(visit.cookie)
    if len(ours) > 1:
        return Verdict(403, "Two content cookies were sent: Open it again from the panel.")
    user = cookie_user(ours[0], host) if ours and from_its_pages(visit, host) else None
    status, why = served.admits(workload, user=user, authorization=visit.authorization)
    if status != 200:
        signin = _signin(host, visit.path) if status == 401 and served.browser else ""
        return Verdict(status, why, signin=signin, browser=served.browser, host=host)
    target = served.target(workload)
    if target is None:
        why = f"The {served.noun} is not running: start it from the panel."
        return Verdict(403, why, browser=served.browser, host=host)
    # Kept by the gateway under everything it was decided on (the host, Cookie, Authorization).
    cache = settings.USER_CONTENT_CACHE_SECONDS if served.cacheable else 0
    return Verdict(
        200,
        address=target.address,
        authorization=target.authorization,
        cookie=cookie,
        cache_seconds=cache,
        count=target.count,
        browser=served.browser,
        host=host,
    )


def split_cookies(header: str) -> tuple[list[str], str]:
    """The content cookie's values (every one sent under its name) and the Cookie header
    without them, for the server."""
    name = cookie_name()
    ours: list[str] = []
    kept: list[str] = []
    for chunk in header.split(";"):
        chunk = chunk.strip()
        key, _, value = chunk.partition("=")
        if key.strip() == name:
            ours.append(value.strip())
        elif chunk:
            kept.append(chunk)
    return ours, "; ".join(kept)


def cookie_user(value: str, host: ContentHost) -> Any | None:
    """The active user whose live panel session opened this host, or None."""
    ticket = ticket_of_cookie(value, host)
    if ticket is None:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(ticket.session_key)
    user = auth.get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]
    if not user.is_authenticated or user.pk != ticket.user_id or not user.is_active:
        return None
    return user


def from_its_pages(visit: Visit, host: ContentHost) -> bool:
    """Whether the cookie may count: a request of the host's own pages, or a top-level
    navigation that only reads (a link from the panel or elsewhere). Browsers say which in
    Sec-Fetch-Site; without it (older browsers, scripts), an Origin naming another site
    refuses, as none does."""
    if visit.fetch_site:
        if visit.fetch_site in ("same-origin", "none"):
            return True
        return (
            visit.method in SAFE_METHODS
            and visit.fetch_mode == "navigate"
            and visit.fetch_dest == "document"
        )
    if visit.origin:
        return _same_origin(visit.origin, visit.host)
    return True


def _same_origin(origin: str, host: str) -> bool:
    parts = urlsplit(origin.strip().lower())
    if parts.scheme != scheme() or not parts.hostname:
        return False
    default = 443 if parts.scheme == "https" else 80
    want_name, _, want_port = host.strip().lower().partition(":")
    return parts.hostname == want_name and (parts.port or default) == int(want_port or default)


def _signin(host: ContentHost, path: str) -> str:
    query = urlencode({"host": host.label, "next": safe_path(path, "/")})
    return f"{settings.SITE_URL}{reverse('usercontent-open')}?{query}"
