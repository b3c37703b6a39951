"""Requests for user content, taken out of the panel's stack before anything of the panel runs
on them (its session, CSRF cookie, CSP, messages): a content host is not the panel's origin.

- `/_ajuste/auth` and `/_ajuste/count` at the panel's cluster-internal address
  (KUBERNETES_PANEL_URL's host, which no public route names): the gateway's `auth_request`,
  and its count of an app's requests. At any other host they are not found.
- any host under USER_CONTENT_DOMAIN: the ticket exchange at `/_ajuste/ticket`; every other
  path is the workload's own, proxied here under the local backend (`make run`: the browser
  reaches `nb-<id>.localhost` on the panel's port), and the gateway's on a cluster. Here the
  gateway's throttling is kept too (throttle.py: its knobs, its 429).

They come before the ALLOWED_HOSTS check, which would refuse every content host: these views
build no URL from the Host header but the content host's own, checked by hosts.parse_host."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from controlpanel.usercontent import proxy, throttle, views
from controlpanel.usercontent.hosts import is_content_host
from controlpanel.usercontent.tickets import TICKET_PATH

AUTH_PATH = "/_ajuste/auth"
COUNT_PATH = "/_ajuste/count"

Answer = HttpResponse | StreamingHttpResponse


class UserContentMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], Answer]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Answer:
        host = request.META.get("HTTP_HOST", "")
        if request.path_info in (AUTH_PATH, COUNT_PATH):
            if not internal_host(host):
                return views.refusal_text(404, "Not found.")
            if request.path_info == COUNT_PATH:
                return views.gateway_count(request)
            return views.gateway_auth(request)
        if not is_content_host(host):
            return self.get_response(request)
        signin = request.path_info == TICKET_PATH
        if proxied_here() and throttle.throttled(request.META, signin=signin):
            return throttle.too_many(request.META, signin=signin)  # the gateway's budgets
        if signin:
            return views.ticket_exchange(request)
        if proxied_here():
            return proxy.content_proxy(request)
        return views.refusal_text(404, "User content is served by the gateway, not the panel.")


def internal_host(host: str) -> bool:
    """Whether the request addressed the panel at KUBERNETES_PANEL_URL's host."""
    internal = (urlsplit(settings.KUBERNETES_PANEL_URL).hostname or "").lower()
    return bool(internal) and host.strip().lower().rsplit(":", 1)[0] == internal


def proxied_here() -> bool:
    """The panel itself proxies user content on the local backend (its servers listen on
    loopback, beside it); on a cluster the gateway does."""
    return bool(settings.COMPUTE_BACKEND == "local")
