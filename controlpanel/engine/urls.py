"""Job and notebook pages, and the API's /api/v1/jobs/ and /api/v1/flavors/."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.engine import (
    api,
    app_api,
    app_auth,
    app_views,
    notebook_api,
    notebook_views,
    views,
)

P = "p/<slug:slug>/jobs/"

urlpatterns = [
    path(P, views.job_list, name="job-list"),
    path(P + "new/", views.job_new, name="job-new"),
    path(P + "<str:job_id>/", views.job_detail, name="job-detail"),
    path(P + "<str:job_id>/status/", views.job_status, name="job-status"),
    path(P + "<str:job_id>/logs/", views.job_logs, name="job-logs"),
    path(P + "<str:job_id>/logs/download/", views.job_log_download, name="job-log-download"),
    path(P + "<str:job_id>/<slug:action>/", views.job_action, name="job-action"),
]

NB = "p/<slug:slug>/notebooks/"
ONE = NB + "<str:notebook_id>/"
urlpatterns += [
    path(NB, notebook_views.notebook_list, name="notebook-list"),
    path(NB + "new/", notebook_views.notebook_new, name="notebook-new"),
    path(ONE, notebook_views.notebook_detail, name="notebook-detail"),
    path(ONE + "status/", notebook_views.notebook_status, name="notebook-status"),
    path(ONE + "logs/", notebook_views.notebook_logs, name="notebook-logs"),
    path(
        ONE + "logs/download/", notebook_views.notebook_log_download, name="notebook-log-download"
    ),
    path(ONE + "open/", notebook_views.notebook_open, name="notebook-open"),
    path(ONE + "<slug:action>/", notebook_views.notebook_action, name="notebook-action"),
]

AP = "p/<slug:slug>/apps/"
APP = AP + "<str:app_id>/"
urlpatterns += [
    path(AP, app_views.app_list, name="app-list"),
    path(AP + "new/", app_views.app_new, name="app-new"),
    path(APP, app_views.app_detail, name="app-detail"),
    path(APP + "status/", app_views.app_status, name="app-status"),
    path(APP + "logs/", app_views.app_logs, name="app-logs"),
    path(APP + "logs/download/", app_views.app_log_download, name="app-log-download"),
    path(APP + "try/", app_views.app_try_it, name="app-try"),
    path(APP + "<slug:action>/", app_views.app_action, name="app-action"),
    # An app's URL on the local backend (token checked, then proxied to its server).
    path("a/<slug:slug>/<uuid:app_id>/<path:rest>", app_auth.app_proxy, name="app-proxy"),
    # Answered by NotebookAuthMiddleware before the host checks; routed here for reverse().
    path("auth/app/<uuid:app_id>", app_auth.app_auth, name="app-auth"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("jobs", api.JobViewSet, basename="api-job")
    routes.viewset("notebooks", notebook_api.NotebookViewSet, basename="api-notebook")
    routes.viewset("apps", app_api.AppViewSet, basename="api-app")
    routes.viewset("flavors", api.FlavorViewSet, basename="api-flavor")
