"""/api/v1/ is what the apps in API_APPS add (each app's `urls.api_routes()`), then the schema,
its docs, and a JSON 404 for the rest of /api/."""

from importlib import import_module

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from controlpanel.api import errors
from controlpanel.api.routes import ApiRoutes
from controlpanel.kinds import KINDS

# Each workload kind registers its own routes (its package's urls.py), in the order of
# controlpanel/kinds.py, named by its whole package (a kind may live outside controlpanel/);
# the engine's are what they share (the flavors).
KIND_APPS = list(KINDS.values())

API_APPS = [
    "projects",
    "accounts",
    "buckets",
    *KIND_APPS,
    "engine",
    "billing",
    "dashboards",
    "sweeps",
]
# Apps whose `api_routes()` is not in their urls.py (billing's urls.py is the admins' pages).
API_MODULES = {"billing": "controlpanel.billing.team_urls"}


def api_module(app: str) -> str:
    """The module whose `api_routes()` adds the app's routes (an app named by its whole
    package: that package's urls.py)."""
    if "." in app:
        return f"{app}.urls"
    return API_MODULES.get(app, f"controlpanel.{app}.urls")


def api_routes() -> ApiRoutes:
    routes = ApiRoutes()
    for app in API_APPS:
        import_module(api_module(app)).api_routes(routes)
    return routes


urlpatterns = [
    path("api/v1/", include(api_routes().urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    # Last of all (the root URLconf includes this module last): a JSON 404, not the HTML page.
    re_path(r"^api/(?P<path>.*)$", errors.not_found, name="api-not-found"),
]
