"""Websockets to a notebook under `make run` (JupyterLab's kernels and terminals): the panel's
WSGI application, wrapped here, takes an upgrade to a content host before Django, asks the gate,
then joins the browser's socket to the server's on loopback and copies bytes both ways until
either closes. gunicorn hands the socket over (`gunicorn.socket`, as flask-sock uses it) and,
told by StopIteration, closes the connection without writing anything more on it.

One tunnel holds one of the web's threads for as long as it is open, so at most half of
WEB_THREADS are tunnels at once (a refused upgrade says why; JupyterLab retries). On a cluster
the gateway's nginx carries websockets and this wrapper lets everything through."""

from __future__ import annotations

import os
import selectors
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.db import close_old_connections

from controlpanel.usercontent import throttle
from controlpanel.usercontent.gate import Verdict, Visit, gate_check
from controlpanel.usercontent.hosts import is_content_host
from controlpanel.usercontent.middleware import proxied_here
from controlpanel.usercontent.proxy import HOP, REPLACED

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
CHUNK = 64 * 1024
# Request headers of the handshake the server needs: the upgrade's own (Connection and
# Upgrade are hop-by-hop for everything else).
HANDSHAKE = frozenset({"connection", "upgrade"})
_slots = threading.BoundedSemaphore(max(1, int(os.environ.get("WEB_THREADS") or 8) // 2))


class ContentTunnel:
    """WSGI middleware: websocket upgrades to a content host, tunnelled; all else, through."""

    def __init__(self, application: Wsgi) -> None:
        self.application = application

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        upgrade = environ.get("HTTP_UPGRADE", "").lower() == "websocket"
        if upgrade and is_content_host(environ.get("HTTP_HOST", "")) and proxied_here():
            return tunnel(environ, start_response)
        return self.application(environ, start_response)


def tunnel(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if throttle.throttled(environ, signin=False):  # the gateway's budgets, as every request's
        return _plain(start_response, 429, throttle.TEXT, [("Retry-After", "1")])
    close_old_connections()
    try:
        verdict = gate_check(_visit(environ))
    finally:
        close_old_connections()  # the tunnel may last hours: no connection held meanwhile
    browser = environ.get("gunicorn.socket")
    if verdict.status != 200:
        return _plain(start_response, verdict.status, verdict.reason)
    if browser is None:
        return _plain(start_response, 501, "Websockets need the panel served by gunicorn.")
    if not _slots.acquire(blocking=False):
        return _plain(start_response, 503, "Too many open websockets: close a tab, then retry.")
    try:
        _join(browser, environ, verdict)
    finally:
        _slots.release()
    raise StopIteration  # gunicorn: close the connection, write nothing more


def _visit(environ: dict[str, Any]) -> Visit:
    return Visit(
        host=environ.get("HTTP_HOST", ""),
        method=environ.get("REQUEST_METHOD", "GET"),
        path=_uri(environ),
        cookie=environ.get("HTTP_COOKIE", ""),
        authorization=environ.get("HTTP_AUTHORIZATION", ""),
        origin=environ.get("HTTP_ORIGIN", ""),
        fetch_site=environ.get("HTTP_SEC_FETCH_SITE", "").lower(),
        fetch_mode=environ.get("HTTP_SEC_FETCH_MODE", "").lower(),
        fetch_dest=environ.get("HTTP_SEC_FETCH_DEST", "").lower(),
    )


def _uri(environ: dict[str, Any]) -> str:
    raw = environ.get("RAW_URI")
    if raw:
        return str(raw)
    query = environ.get("QUERY_STRING", "")
    return str(environ.get("PATH_INFO", "/")) + (f"?{query}" if query else "")


def handshake(environ: dict[str, Any], verdict: Verdict) -> bytes:
    """The upgrade request as the server gets it (the same rules as proxy.upstream_headers)."""
    lines = [f"{environ.get('REQUEST_METHOD', 'GET')} {_uri(environ)} HTTP/1.1"]
    for key, value in environ.items():
        if not key.startswith("HTTP_"):
            continue
        name = key[5:].replace("_", "-").lower()
        if name in REPLACED or (name in HOP and name not in HANDSHAKE):
            continue
        lines.append(f"{name}: {value}")
    lines.append(f"host: {verdict.address}")
    if environ.get("HTTP_ORIGIN"):
        lines.append(f"origin: http://{verdict.address}")
    if verdict.cookie:
        lines.append(f"cookie: {verdict.cookie}")
    if verdict.authorization:
        lines.append(f"authorization: {verdict.authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _join(browser: socket.socket, environ: dict[str, Any], verdict: Verdict) -> None:
    address, _, port = verdict.address.rpartition(":")
    try:
        server = socket.create_connection((address, int(port)), timeout=5)
    except OSError:
        browser.sendall(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        return
    with server:
        server.settimeout(None)
        browser.setblocking(True)
        server.sendall(handshake(environ, verdict))
        copy_both_ways(browser, server)


def copy_both_ways(one: socket.socket, other: socket.socket) -> None:
    """Bytes from each socket to the other until either closes (a websocket ends with its
    own close frames, which pass through before the connection goes)."""
    peers = {one: other, other: one}
    with selectors.DefaultSelector() as selector:
        for sock in peers:
            selector.register(sock, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                source: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = source.recv(CHUNK)
                    if data:
                        peers[source].sendall(data)
                except OSError:
                    data = b""
                if not data:
                    return


def _plain(
    start_response: Callable[..., Any],
    status: int,
    message: str,
    extra: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    reasons = {401: "Unauthorized", 403: "Forbidden", 429: "Too Many Requests"}
    reasons.update({501: "Not Implemented", 503: "Service Unavailable"})
    start_response(
        f"{status} {reasons.get(status, 'Error')}",
        [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")]
        + (extra or []),
    )
    return [(message + "\n").encode()]
