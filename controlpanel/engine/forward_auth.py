"""The forward-auth endpoints of the kinds served behind ingress-nginx (a notebook's editor, an
app's API): ingress-nginx asks them at the web Service's cluster name, over plain http, before
every request to the workload, so they are answered here, at the top of MIDDLEWARE, before the
host and HTTPS checks (like the health probes). Each kind's route declares itself one by its
name (`<kind>-auth`, under /auth/); the views build no URL from the Host header and set no
cookie, so neither check protects anything there."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from controlpanel.engine.registry import kinds

PREFIX = "/auth/"


class ForwardAuthMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.names = {f"{kind.name}-auth" for kind in kinds()}

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(PREFIX):
            try:
                match = resolve(request.path_info)
            except Resolver404:
                match = None
            if match is not None and match.url_name in self.names:
                response: HttpResponse = match.func(request, *match.args, **match.kwargs)
                return response
        return self.get_response(request)
