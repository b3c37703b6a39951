"""The ticket exchange's three ends and the gateway's question:

- `content_open` (the panel's host): a signed-in user's Open, or the gateway's sign-in
  redirect, becomes a one-time ticket and a redirect to the workload's host;
- `ticket_exchange` (the workload's host, `/_ajuste/ticket`): the ticket becomes the host's
  own cookie, then a redirect to the path asked;
- `gateway_auth` (`/_ajuste/auth`, at the panel's cluster-internal address only): nginx's
  `auth_request` before each request to a content host, answered by gate.py;
- `gateway_count` (`/_ajuste/count`, there too): each request the gateway let through to an
  app, told beside it (nginx's mirror), whether the yes was asked or kept.

Refusals on a content host are plain text (or an OpenAI-shaped JSON error for API kinds):
nothing of the panel's pages, scripts or cookies is served on a user's origin."""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_GET

from controlpanel.core.errorpages import error_page
from controlpanel.core.metrics import store
from controlpanel.usercontent import served as kinds
from controlpanel.usercontent.gate import Verdict, Visit, cookie_user, gate_check
from controlpanel.usercontent.hosts import ContentHost, content_host, domain, parse_host
from controlpanel.usercontent.tickets import (
    cookie_name,
    cookie_value,
    safe_path,
    ticket_issue,
    ticket_redeem,
)


def open_workload(
    request: HttpRequest, *, kind: str, workload: Any, path: str = ""
) -> HttpResponse:
    """Open for one workload the page already resolved (its kind's Open button): a redirect
    through a new ticket to `path` on its host (its landing page when empty)."""
    served = kinds.by_kind(kind)
    if served is None:
        raise LookupError(f"the kind {kind!r} serves no user content")
    host = content_host(served.prefix, workload.pk)
    return _issue(request, served, host, workload, path)


@login_required
@require_GET
def content_open(request: HttpRequest) -> HttpResponse:
    """`?host=<nb-...>&next=<path>`: where the gateway sends a browser that has no valid
    cookie for a host (signing in first). The kind's own rule decides, as for its Open."""
    label = request.GET.get("host", "")
    host = parse_host(label + "." + str(domain())) if label else None
    served = kinds.by_prefix(host.prefix) if host else None
    workload = served.find(host.workload_id) if served and host else None
    if host is None or served is None or workload is None:
        return error_page(request, status=404, message="No such notebook or app.")
    return _issue(request, served, host, workload, request.GET.get("next", ""))


def _issue(
    request: HttpRequest, served: kinds.Served, host: ContentHost, workload: Any, path: str
) -> HttpResponse:
    status, why = served.admits(workload, user=request.user, authorization="")
    if status != 200:
        # Nothing is said of another project's work; in one's own project, why not.
        hidden = status == 404 or why.startswith("No such")
        return error_page(request, status=404 if hidden else 403, message=why)
    if served.target(workload) is None:
        message = f"The {served.noun} is not running: start it, then open it."
        return error_page(request, status=403, message=message)
    if not request.session.session_key:
        request.session.cycle_key()  # a session with no row yet (a test's force_login)
    url = ticket_issue(
        user=request.user,
        session_key=request.session.session_key or "",
        kind=served.kind,
        host=host,
        next_path=safe_path(path, served.landing(workload)),
    )
    response = HttpResponseRedirect(url)
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


def ticket_exchange(request: HttpRequest) -> HttpResponse:
    """`/_ajuste/ticket?ticket=...` on a workload's host: sets the host's cookie once."""
    host = parse_host(request.META.get("HTTP_HOST", ""))
    if host is None:
        return refusal_text(404, "No notebook or app is served at this address.")
    if request.method not in ("GET", "HEAD"):
        return refusal_text(405, "Open it from the panel.")
    ticket = ticket_redeem(raw=request.GET.get("ticket", ""), host=host)
    if ticket is None:
        return refusal_text(
            403, f"This link was used or has expired: open it again from {_panel()}."
        )
    response = HttpResponseRedirect(ticket.next_path)
    value = cookie_value(ticket, host)
    if cookie_user(value, host) is None:  # logged out (or deactivated) since the Open
        return refusal_text(403, f"Your panel session has ended: sign in again at {_panel()}.")
    response.set_cookie(
        cookie_name(),
        value,
        max_age=settings.USER_CONTENT_SESSION_SECONDS,
        path="/",
        secure=settings.HTTPS,
        httponly=True,
        samesite="Lax",
    )
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


def gateway_auth(request: HttpRequest) -> HttpResponse:
    """nginx's auth subrequest (images/gateway/nginx.conf.template): the original request's
    host, method and URI come as X-Ajuste-Host, X-Original-Method and X-Original-URI, its own
    headers as they were. 200 names the server (X-Ajuste-Upstream) and the headers it gets;
    X-Accel-Expires is how long nginx may keep the answer (0: ask again next time)."""
    visit = Visit.of(
        request.headers,
        host=request.headers.get("X-Ajuste-Host", ""),
        method=request.headers.get("X-Original-Method", "GET"),
        path=request.headers.get("X-Original-URI", "/"),
    )
    verdict = gate_check(visit)
    response = HttpResponse(status=verdict.status if verdict.status in (200, 401) else 403)
    response["X-Accel-Expires"] = str(verdict.cache_seconds)
    response["Cache-Control"] = "no-store"
    if verdict.status == 200:
        response["X-Ajuste-Upstream"] = verdict.address
        response["X-Ajuste-Authorization"] = verdict.authorization
        response["X-Ajuste-Cookie"] = verdict.cookie
        response["X-Ajuste-Count"] = verdict.count
    else:
        # nginx writes it into a JSON string or a text page: nothing that would end either.
        response["X-Ajuste-Reason"] = verdict.reason.replace('"', "'").replace("\\", "/")
        response["X-Ajuste-Signin"] = verdict.signin
        response["X-Ajuste-Format"] = "text" if verdict.browser else "json"
    return response


def gateway_count(request: HttpRequest) -> HttpResponse:
    """`X-Ajuste-Count: <namespace>/<service>`, as the panel's yes named it: one request let
    through, counted for that app's autoscaler (ajuste_app_requests_total)."""
    if request.method != "POST":
        return refusal_text(405, "POST the count.")
    namespace, _, service = request.headers.get("X-Ajuste-Count", "").partition("/")
    if not (_DNS_LABEL.fullmatch(namespace) and _DNS_LABEL.fullmatch(service)):
        return refusal_text(400, "X-Ajuste-Count: <namespace>/<service>, as /_ajuste/auth said.")
    store.count_app_request(namespace=namespace, app=service)
    return HttpResponse(status=204)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def refusal(verdict: Verdict) -> HttpResponse:
    """What a refused visitor reads on the content host (the local proxy's answer; the
    gateway renders the same from X-Ajuste-Reason and X-Ajuste-Signin)."""
    if verdict.signin:
        response: HttpResponse = HttpResponseRedirect(verdict.signin)
    elif verdict.browser:
        response = refusal_text(verdict.status, verdict.reason)
    else:
        kind = "authentication_error" if verdict.status == 401 else "permission_error"
        body = {"error": {"message": verdict.reason, "type": kind, "code": None}}
        response = HttpResponse(json.dumps(body), status=verdict.status)
        response["Content-Type"] = "application/json"
        if verdict.status == 401:
            response["WWW-Authenticate"] = "Bearer"
    response["Cache-Control"] = "no-store"
    return response


def refusal_text(status: int, message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status)
    response["Content-Type"] = "text/plain; charset=utf-8"
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "no-store"
    return response


def _panel() -> str:
    return str(settings.SITE_URL)
