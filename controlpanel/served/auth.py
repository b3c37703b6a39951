"""Who may call an app: by default only the API tokens of its project's members
(`Authorization: Bearer <token>`, the same personal tokens as the REST API); anyone when its
owner made it public. One rule (`app_caller`), asked in two places:

- on a cluster, ingress-nginx asks `/auth/app/<id>` before every request (forward-auth, like
  notebooks; answered by NotebookAuthMiddleware before the host checks): 2xx lets it through,
  401 or 403 is the caller's answer;
- on the local backend, `app_proxy` (`/a/<project>/<id>/<path>`) checks the caller, then
  streams the request to the app's server on 127.0.0.1 and its answer back.

A token is never logged, never forwarded to the server (the proxy drops the Authorization and
Cookie headers), and only its digest is looked up. Unknown apps, other projects' apps and
apps of a project the token's user is not in all answer 404 alike (nothing is revealed).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

import httpx
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from controlpanel.accounts.services import token_authenticate
from controlpanel.projects.models import Membership
from controlpanel.served import stats as app_stats
from controlpanel.served.config import SERVING, app_path
from controlpanel.served.config import Serving as AppConfig
from controlpanel.served.models import App

AUTH_PREFIX = "/auth/app/"
# Request headers the server never sees: the caller's credentials, and hop-by-hop ones.
DROPPED = frozenset(
    {
        "authorization",
        "cookie",
        "host",
        "connection",
        "keep-alive",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
PASSED_BACK = ("content-type", "cache-control")
MAX_BODY = 10 * 1024 * 1024


def _error(status: int, message: str, kind: str) -> JsonResponse:
    """An OpenAI-shaped error, so clients show the message."""
    response = JsonResponse(
        {"error": {"message": message, "type": kind, "code": None}}, status=status
    )
    response["Cache-Control"] = "no-store"
    if status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response


def app_caller(app: App | None, authorization: str) -> tuple[int, str]:
    """(200, "") when this caller may reach the app, else the status and why."""
    if app is None:
        return 404, "No such app."
    if AppConfig.of(app).public:
        return 200, ""
    scheme, _, raw = authorization.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return 401, "Send a project API token: Authorization: Bearer <token>."
    token = token_authenticate(raw=raw.strip())
    if token is None:
        return 401, "Invalid, expired or revoked token."
    # project_access's rule (a member, or a site admin), in one query: the app's project is
    # known, and this runs before every call to the app.
    user = token.user
    if (
        not user.is_staff
        and not Membership.objects.filter(project_id=app.project_id, user_id=user.pk).exists()
    ):
        return 404, "No such app."
    return 200, ""


def _app(project: str | None, app_id: object) -> App | None:
    try:
        key = uuid.UUID(str(app_id))
    except ValueError:
        return None
    apps = App.objects.select_related("project").only(
        "id", "state", "url", "params", "project__slug", "project__id"
    )
    app = apps.filter(pk=key).first()
    if app is None or (project is not None and app.project.slug != project):
        return None
    return app


_client_lock = threading.Lock()
_client: httpx.Client | None = None


def upstream_client() -> httpx.Client:
    """One pooled client per process for every app's server (built once)."""
    global _client
    with _client_lock:
        if _client is None:
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
            timeout = httpx.Timeout(connect=5.0, read=300.0, write=60.0, pool=30.0)
            _client = httpx.Client(limits=limits, timeout=timeout, trust_env=False)
        return _client


def _loopback(url: str) -> bool:
    """The local backend's servers listen on 127.0.0.1: nothing else is proxied."""
    parts = urlsplit(url)
    return parts.scheme == "http" and parts.hostname == "127.0.0.1" and bool(parts.port)


@csrf_exempt
def app_proxy(
    request: HttpRequest, slug: str, app_id: uuid.UUID, rest: str = ""
) -> HttpResponse | StreamingHttpResponse:
    """The app's URL on the local backend (see the module's docstring). Each forwarded
    request is counted in the app's figures (app_stats) once its answer is relayed."""
    began = time.perf_counter()
    app = _app(slug, app_id)
    status, why = app_caller(app, request.headers.get("Authorization", ""))
    if status != 200 or app is None:
        return _error(status, why, "authentication_error" if status == 401 else "not_found_error")
    if app.state not in SERVING or not _loopback(app.url):
        return _error(503, f"The app is {app.state}: start it to call it.", "unavailable")
    if int(request.headers.get("Content-Length") or 0) > MAX_BODY:
        return _error(413, "The request body is too large.", "invalid_request_error")
    target = f"{app.url}/{rest}"
    if request.META.get("QUERY_STRING"):
        target += "?" + request.META["QUERY_STRING"]
    headers = {k: v for k, v in request.headers.items() if k.lower() not in DROPPED}
    client = upstream_client()
    upstream = client.build_request(
        request.method or "GET", target, headers=headers, content=request.body
    )
    try:
        answer = client.send(upstream, stream=True)
    except httpx.HTTPError:
        app_stats.record(app_id=app.pk, status=502, seconds=time.perf_counter() - began)
        return _error(502, "The app's server did not answer.", "unavailable")
    response = StreamingHttpResponse(_relay(answer, app.pk, began), status=answer.status_code)
    for name in PASSED_BACK:
        if name in answer.headers:
            response[name] = answer.headers[name]
    response["X-Accel-Buffering"] = "no"  # server-sent events go out as they come
    return response


def _relay(answer: httpx.Response, app_id: uuid.UUID, began: float) -> Iterator[bytes]:
    """The server's answer, as it comes; counted when it ends (or the caller went away)."""
    status = answer.status_code
    try:
        yield from answer.iter_raw()
    except httpx.HTTPError:
        status = 502  # the server broke off mid-answer
        raise
    finally:
        answer.close()
        app_stats.record(app_id=app_id, status=status, seconds=time.perf_counter() - began)


def app_auth(request: HttpRequest, app_id: uuid.UUID) -> HttpResponse:
    """ingress-nginx's auth subrequest for one app: the caller's Authorization header comes
    with it, and the original path must lie under this app's own (`/a/<project>/<id>/`)."""
    app = _app(None, app_id)
    status, _ = app_caller(app, request.headers.get("Authorization", ""))
    if status == 404:
        status = 403  # to ingress-nginx, anything but 2xx/401/403 is its own failure (500)
    if status == 200 and app is not None:
        original = request.headers.get("X-Original-URI") or request.headers.get(
            "X-Original-URL", ""
        )
        path = unquote(urlsplit(original).path)
        base = app_path(app)
        if ".." in path.split("/") or not path.startswith(base) or app.state not in SERVING:
            status = 403
    response = HttpResponse(status=status)
    response["Cache-Control"] = "no-store"
    return response
