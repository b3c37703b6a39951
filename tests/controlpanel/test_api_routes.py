"""Each app registers its own API routes (`api_routes()` in its urls.py, collected by
controlpanel/api/urls.py for every app in API_APPS): a route under /api/v1/ is served by a
view of the app that registered it, and what is served there is what the apps registered."""

from __future__ import annotations

import contextlib
from importlib import import_module

from django.urls import URLPattern, URLResolver, get_resolver

from controlpanel.api.routes import ApiRoutes
from controlpanel.api.urls import API_APPS, api_module


def _patterns(patterns: list[URLPattern | URLResolver]) -> list[URLPattern]:
    found: list[URLPattern] = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found += _patterns(pattern.url_patterns)
        else:
            found.append(pattern)
    return found


def _registered_by(app: str) -> list[URLPattern]:
    routes = ApiRoutes()
    import_module(api_module(app)).api_routes(routes)
    return [p for p in _patterns(routes.urls) if p.name != "api-root"]


def test_each_app_registers_only_its_own_views() -> None:
    for app in API_APPS:
        registered = _registered_by(app)
        assert registered, f"{app} registers no API route"
        package = app if "." in app else f"controlpanel.{app}"  # a kind: its whole package
        for pattern in registered:
            module = pattern.callback.__module__
            assert module.startswith(f"{package}."), (app, pattern.name, module)


def _resolver(patterns: list[URLPattern | URLResolver], route: str) -> URLResolver:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if str(pattern.pattern) == route:
                return pattern
            with contextlib.suppress(LookupError):
                return _resolver(pattern.url_patterns, route)
    raise LookupError(route)


def test_the_api_serves_what_the_apps_registered() -> None:
    registered = {p.name for app in API_APPS for p in _registered_by(app)}
    api_v1 = _resolver(get_resolver().url_patterns, "api/v1/")
    served = {p.name for p in _patterns(api_v1.url_patterns)} - {"api-root"}
    assert served == registered
    assert {"api-me", "api-project-list", "api-bucket-detail", "api-job-logs"} <= served
