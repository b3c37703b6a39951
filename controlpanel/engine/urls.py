"""Every kind's pages, in the order of controlpanel/kinds.py (each kind's `urls.py`; each kind
adds its API routes itself, controlpanel/api/urls.py), and what the kinds share in the API:
`/api/v1/flavors/`."""

from django.urls import include, path

from controlpanel.api.routes import ApiRoutes
from controlpanel.engine import api
from controlpanel.engine.registry import kinds, package_of

urlpatterns = [path("", include(f"{package_of(kind)}.urls")) for kind in kinds()]


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("flavors", api.FlavorViewSet, basename="api-flavor")
