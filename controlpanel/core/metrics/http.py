"""The web side of metrics: every request timed, and /metrics itself.

Site admins read /metrics with their session, always (`make run` sets no token, and an admin
still wants to see what the panel measures). Prometheus reads it with
`Authorization: Bearer <METRICS_TOKEN>` (compared in constant time); while METRICS_TOKEN is
empty, everyone but a site admin gets 404, as if the page did not exist.
A scrape with a bearer token is answered at the top of the middleware stack, as the health
probes are, so Prometheus can scrape a pod at its IP over plain http without a
host name from ALLOWED_HOSTS; a session read goes through the whole stack like any page.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.utils.crypto import constant_time_compare
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controlpanel.core.metrics import store
from controlpanel.core.metrics.collectors import registry

PATH = "/metrics"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_of(request: HttpRequest) -> str:
    """The URL pattern's name (never the path: ids would make a series each), "unmatched"
    for a path no pattern takes."""
    match = getattr(request, "resolver_match", None)
    if match is None:  # answered before routing (a probe, forward-auth) or not routed
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return "unmatched"
    return match.view_name


class RequestMetricsMiddleware:
    """Times every request into ajuste_http_request_duration_seconds (route, method, status
    class). A streamed body is not included: the time is to the response's headers."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        store.observe_request(
            route=route_of(request),
            method=request.method if request.method in METHODS else "other",
            status=f"{response.status_code // 100}xx",
            seconds=time.perf_counter() - started,
        )
        return response


class MetricsScrapeMiddleware:
    """Answers a scrape that brings a bearer token before the host and HTTPS checks."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info == PATH and _bearer(request) is not None:
            try:
                return metrics(request)
            except Http404:
                return HttpResponse("Not Found", status=404, content_type="text/plain")
        return self.get_response(request)


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def _unauthorized() -> HttpResponse:
    response = HttpResponse("Unauthorized\n", status=401, content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def _site_admin(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)


def _allowed(request: HttpRequest, token: str) -> bool:
    """The bearer when one is sent (a session does not make a wrong token right), else the
    session of a site admin."""
    bearer = _bearer(request)
    if bearer is not None:
        return bool(token) and constant_time_compare(bearer, token)
    return _site_admin(request)


@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format, for the METRICS_TOKEN bearer or a site admin's session."""
    token = settings.METRICS_TOKEN
    if not token and (_bearer(request) is not None or not _site_admin(request)):
        raise Http404("metrics are off for scrapers (METRICS_TOKEN is not set)")
    if request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
    if not _allowed(request, token):
        return _unauthorized()
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
