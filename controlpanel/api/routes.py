"""How an app adds its routes under /api/v1/.

Each app in `controlpanel.api.urls.API_APPS` has, in its `urls.py`, an `api_routes(routes)`
that names its viewsets and views; a new API (a workload kind, say) is its viewset and one
`routes.viewset(...)` line in its own app. Viewsets share one router, so every one answers
with or without the trailing slash and is listed by the API root.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpResponseBase
from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import DefaultRouter
from rest_framework.viewsets import ViewSetMixin


class ApiRoutes:
    """The routes under /api/v1/, as the apps add them."""

    def __init__(self) -> None:
        self.router = DefaultRouter()
        self.router.include_format_suffixes = False
        # PRODUCT.md documents `/api/v1/jobs/<id>/logs`: answer with or without the slash (a
        # 301 breaks clients that do not follow redirects). The constructor only takes a bool.
        self.router.trailing_slash = "/?"
        self.views: list[URLPattern] = []

    def viewset(self, prefix: str, viewset: type[ViewSetMixin], *, basename: str) -> None:
        """`<prefix>/`, `<prefix>/<lookup>/` and the viewset's actions; the route names are
        `<basename>-list`, `<basename>-detail` and `<basename>-<action>`."""
        self.router.register(prefix, viewset, basename=basename)

    def view(self, route: str, view: Callable[..., HttpResponseBase], *, name: str) -> None:
        """One view at `route` (`path()` syntax, relative to /api/v1/, its slash as written)."""
        self.views.append(path(route, view, name=name))

    @property
    def urls(self) -> list[URLPattern | URLResolver]:
        return [*self.views, *self.router.urls]
