"""App pages (`/p/<slug>/apps/...`) and the API's `/api/v1/apps/` (the app itself is served on
its own host: controlpanel/usercontent)."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.served import api, app_tokens_api, views

AP = "p/<slug:slug>/apps/"
APP = AP + "<str:app_id>/"
urlpatterns = [
    path(AP, views.app_list, name="app-list"),
    path(AP + "new/", views.app_new, name="app-new"),
    path(APP, views.app_detail, name="app-detail"),
    path(APP + "status/", views.app_status, name="app-status"),
    path(APP + "logs/", views.app_logs, name="app-logs"),
    path(APP + "logs/download/", views.app_log_download, name="app-log-download"),
    path(APP + "try/", views.app_try_it, name="app-try"),
    path(APP + "<slug:action>/", views.app_action, name="app-action"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("apps", api.AppViewSet, basename="api-app")
    routes.viewset(
        "projects/(?P<project_slug>[a-z0-9-]+)/app-tokens",
        app_tokens_api.AppTokenViewSet,
        basename="api-app-token",
    )
