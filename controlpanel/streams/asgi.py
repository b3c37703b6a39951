"""The streams' ASGI front: `GET /p/<slug>/<kind>s/<id>/events/` (a page's, with the session),
`/p/<slug>/events/` (a project's lists), `/dashboard/events/` (the site admins' pages) and
`GET /api/v1/<kind>s/<id>/logs/stream/` (the API's, with a bearer token or the session)
answer `text/event-stream`; everything else goes to Django.

The streams are served here, before Django's middleware, because that chain is synchronous:
under ASGI each request through it holds a thread for its whole life, and a stream lives for
hours. What the chain would check is checked here the same way: the host (ALLOWED_HOSTS), the
user (the session's or the token's), the project (`project_access`, as the page does: another
project's member gets 404). The browser's origin must be the panel's (SITE_URL) or one of
STREAMS_ALLOWED_ORIGINS, since under `make run` the streams have their own port.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.http import Http404
from django.http.request import split_domain_port, validate_host

from controlpanel.accounts.services import token_authenticate
from controlpanel.engine.registry import kinds
from controlpanel.streams.feed import Stream, _read, watched
from controlpanel.streams.limits import Refused, Slot
from controlpanel.streams.project import ProjectStream, project_watched
from controlpanel.streams.site import SITE, site_stream, site_watched
from controlpanel.streams.viewer import Viewer, session_user

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

PAGE = re.compile(r"^/p/(?P<slug>[-a-zA-Z0-9_]+)/(?P<plural>[a-z]+)/(?P<id>[^/]+)/events/$")
PROJECT = re.compile(r"^/p/(?P<slug>[-a-zA-Z0-9_]+)/events/$")
API = re.compile(r"^/api/v1/(?P<plural>[a-z]+)/(?P<id>[^/]+)/logs/stream/$")


class StreamsApp:
    """Streams here, all else to `application` (Django's ASGI handler)."""

    def __init__(self, application: Asgi) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        match = PAGE.match(path) or API.match(path) or PROJECT.match(path) or SITE.match(path)
        if match is None:
            return await self.application(scope, receive, send)
        headers = {
            key.decode("latin-1").lower(): v.decode("latin-1") for key, v in scope["headers"]
        }
        cors = _cors(headers.get("origin"))
        try:
            if scope["method"] == "OPTIONS":  # a preflight (Last-Event-ID on reconnection)
                raise Refused(204, "", [(b"access-control-allow-headers", b"last-event-id")])
            if scope["method"] != "GET":
                raise Refused(405, "A stream is read with GET.", [(b"allow", b"GET")])
            stream, slot = await _open(match, headers, scope.get("query_string", b""))
        except Refused as refused:
            return await _plain(send, refused, cors)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
                    *cors,
                ],
            }
        )
        stream.on_heartbeat = slot.keep
        try:
            await _pump(stream, receive, send)
        finally:
            await slot.release()


async def _open(
    match: re.Match[str], headers: dict[str, str], query: bytes
) -> tuple[Stream | ProjectStream, Any]:
    _check_host(headers.get("host", ""))
    if match.re is SITE:  # the site admins' pages' gate: others 404 (not revealed)
        viewer = await _viewer(headers, api=False, what="this page")
        if not await site_watched(viewer.user):
            raise Refused(404, "No such page.")
        slot = await Slot.take(viewer.user.pk)
        return site_stream(viewer, settings.STREAMS_HEARTBEAT_SECONDS), slot
    if match.re is PROJECT:
        viewer = await _viewer(headers, api=False, what="this page")
        found = await project_watched(viewer.user, match["slug"])
        if found is None:
            raise Refused(404, "No such project.")
        slot = await Slot.take(viewer.user.pk)
        heartbeat = settings.STREAMS_HEARTBEAT_SECONDS
        return ProjectStream(viewer, found, match["slug"], heartbeat), slot
    kind = {spec.plural: spec.name for spec in kinds()}.get(match["plural"])
    try:
        workload_id = uuid.UUID(match["id"])
    except ValueError:
        kind = None
    if kind is None:
        raise Refused(404, "No such workload.")
    params = {key: values[-1] for key, values in parse_qs(query.decode("latin-1")).items()}
    after = _number(headers.get("last-event-id") or params.get("after") or "0", "after")
    run = _number(params["run"], "run") if params.get("run") else None
    viewer = await _viewer(headers, api=match.re is API)
    try:
        watch = await watched(viewer.user, kind, workload_id, match.groupdict().get("slug"), run)
    except Http404 as missing:
        raise Refused(404, str(missing)) from None
    slot = await Slot.take(viewer.user.pk)
    return Stream(viewer, watch, after, settings.STREAMS_HEARTBEAT_SECONDS), slot


def _number(value: str, name: str) -> int:
    if not value.isdigit() or len(value) > 12:
        raise Refused(400, f"{name} must be a whole number of 0 or more, not {value[:40]!r}.")
    return int(value)


def _check_host(host: str) -> None:
    domain, _ = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS or (
        [".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else []
    )
    if not domain or not validate_host(domain, allowed):
        raise Refused(400, "This host is not one the panel serves.")


async def _viewer(headers: dict[str, str], *, api: bool, what: str = "this log") -> Viewer:
    authorization = headers.get("authorization", "")
    if authorization:
        scheme, _, raw = authorization.partition(" ")
        token = (
            await _read(token_authenticate)(raw=raw.strip()) if scheme.lower() == "bearer" else None
        )
        if token is None:
            raise Refused(
                401, "Invalid, expired or revoked token.", [(b"www-authenticate", b"Bearer")]
            )
        return Viewer(token.user, token=raw.strip())
    key = _cookie(headers.get("cookie", ""), settings.SESSION_COOKIE_NAME)
    user = await _read(session_user)(key)
    if not user.is_authenticated:
        challenge = [(b"www-authenticate", b"Bearer")] if api else []
        raise Refused(401, f"Log in to follow {what}.", challenge)
    return Viewer(user, session_key=key)


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _cors(origin: str | None) -> list[tuple[bytes, bytes]]:
    if not origin or origin not in settings.STREAMS_ALLOWED_ORIGINS:
        return []
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-credentials", b"true"),
        (b"vary", b"Origin"),
    ]


async def _plain(send: Send, refused: Refused, cors: list[tuple[bytes, bytes]]) -> None:
    body = refused.text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), *refused.headers, *cors]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _pump(stream: Stream | ProjectStream, receive: Receive, send: Send) -> None:
    """Send the stream's events until it ends or the browser goes."""

    async def forward() -> None:
        events = stream.events()
        try:
            async for chunk in events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            await events.aclose()

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    tasks = [asyncio.create_task(forward()), asyncio.create_task(gone())]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if tasks[0] in done:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
