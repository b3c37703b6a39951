"""The local backend's user-content proxy (`make run`): a request to `nb-<id>.localhost:<the
panel's port>` passes the gate, then goes to the workload's server on 127.0.0.1 and its answer
comes back as it is produced (server-sent events, downloads). What the gateway's nginx does on
a cluster, for the few users of one machine; websockets are tunnel.py's.

The server gets the request as its browser sent it, less the content cookie, the caller's
Authorization (the kind's own instead, as the editor's token) and the hop-by-hop headers, with
Host and Origin naming its loopback address (JupyterLab checks both; the gate has checked
the browser's Origin already). Its answer may not set the content cookie."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.cookies import CookieError, SimpleCookie

import httpx
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from controlpanel.usercontent import served as kinds
from controlpanel.usercontent.gate import Verdict, Visit, gate_check
from controlpanel.usercontent.tickets import cookie_name
from controlpanel.usercontent.views import refusal, refusal_text

# Never forwarded either way: hop-by-hop, and what the proxy sets itself.
HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
REPLACED = frozenset({"host", "cookie", "authorization", "origin", "content-length"})
CHUNK = 64 * 1024

_lock = threading.Lock()
_client: httpx.Client | None = None


def client() -> httpx.Client:
    """One pooled client per process for every workload's server (built once)."""
    global _client
    with _lock:
        if _client is None:
            limits = httpx.Limits(max_connections=100, max_keepalive_connections=32)
            timeout = httpx.Timeout(connect=5.0, read=3600.0, write=600.0, pool=30.0)
            _client = httpx.Client(limits=limits, timeout=timeout, trust_env=False)
        return _client


def content_proxy(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    raw_uri = request.META.get("RAW_URI") or request.get_full_path()
    visit = Visit.of(
        request.headers,
        host=request.META.get("HTTP_HOST", ""),
        method=request.method or "GET",
        path=raw_uri,
    )
    verdict = gate_check(visit)
    if verdict.status != 200:
        return refusal(verdict)
    if request.headers.get("Upgrade"):
        return refusal_text(501, "Websockets reach a notebook only through gunicorn (make run).")
    upstream = client().build_request(
        visit.method,
        f"http://{verdict.address}{raw_uri}",
        headers=upstream_headers(request.headers.items(), verdict, bool(visit.origin)),
        content=_body(request),
    )
    began = time.perf_counter()
    record = _recorder(verdict)
    try:
        answer = client().send(upstream, stream=True)
    except httpx.HTTPError:
        record(502, time.perf_counter() - began)
        return refusal_text(502, "The server did not answer: it may be starting or stopped.")
    return _answer(answer, lambda status: record(status, time.perf_counter() - began))


def upstream_headers(items: object, verdict: Verdict, origin: bool) -> list[tuple[str, str]]:
    """The browser's headers as the server gets them (see the module's docstring)."""
    headers = [
        (name, value)
        for name, value in items  # type: ignore[attr-defined]
        if name.lower() not in HOP and name.lower() not in REPLACED
    ]
    headers.append(("Host", verdict.address))
    if origin:
        headers.append(("Origin", f"http://{verdict.address}"))
    if verdict.cookie:
        headers.append(("Cookie", verdict.cookie))
    if verdict.authorization:
        headers.append(("Authorization", verdict.authorization))
    return headers


def _body(request: HttpRequest) -> Iterator[bytes] | bytes:
    if not int(request.headers.get("Content-Length") or 0):
        return b""
    return iter(lambda: request.read(CHUNK), b"")


def _recorder(verdict: Verdict) -> Callable[[int, float], None]:
    """The kind's count of one forwarded request (an app's figures), or nothing."""
    host = verdict.host
    served = kinds.by_prefix(host.prefix) if host else None
    record = getattr(served, "record", None)
    if host is None or record is None:
        return lambda status, seconds: None
    return lambda status, seconds: record(host.workload_id, status=status, seconds=seconds)


def _answer(answer: httpx.Response, done: Callable[[int], None]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(_relay(answer, done), status=answer.status_code)
    for name, value in answer.headers.multi_items():
        lowered = name.lower()
        if lowered == "set-cookie":
            _pass_cookie(response, value)
        elif lowered not in HOP:
            response[name] = value
    response["X-Accel-Buffering"] = "no"
    return response


def _pass_cookie(response: StreamingHttpResponse, header: str) -> None:
    """The server's cookie, unless it is (or would shadow) the content cookie."""
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(header)
    except CookieError:
        return
    for name, morsel in cookie.items():
        if name != cookie_name():
            response.cookies[name] = morsel


def _relay(answer: httpx.Response, done: Callable[[int], None]) -> Iterator[bytes]:
    """The server's answer as it comes; counted when it ends (or the browser went away)."""
    status = answer.status_code
    try:
        yield from answer.iter_raw(CHUNK)
    except httpx.HTTPError:
        status = 502  # the server broke off mid-answer
        raise
    finally:
        answer.close()
        done(status)
