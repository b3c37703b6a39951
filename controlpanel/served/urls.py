"""App pages (`/p/<slug>/apps/...`) and the API's `/api/v1/apps/` (the app itself is served on
its own host: controlpanel/usercontent)."""

from controlpanel.api.routes import ApiRoutes
from controlpanel.engine.routes import kind_urls
from controlpanel.served import api, app_tokens_api, views
from controlpanel.served.kind import KIND

urlpatterns = kind_urls(KIND, views, own={"try": views.app_try_it})


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("apps", api.AppViewSet, basename="api-app")
    routes.viewset(
        "projects/(?P<project_slug>[a-z0-9-]+)/app-tokens",
        app_tokens_api.AppTokenViewSet,
        basename="api-app-token",
    )
