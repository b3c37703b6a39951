"""Health endpoints answered before the host and HTTPS checks.

The kubelet probes a pod at its IP over plain http: with the probes at the top of the middleware
stack, a probe needs no `Host` from ALLOWED_HOSTS nor an `X-Forwarded-Proto` header, so the
manifests do not repeat the site's host name."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from controlpanel.core import views

PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": views.healthz,
    "/readyz": views.readyz,
}


class HealthProbeMiddleware:
    """Answers GET /healthz and /readyz itself; every other request goes on."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info)
        if probe is not None and request.method in ("GET", "HEAD"):
            return probe(request)
        return self.get_response(request)
