"""Notebook pages (`/p/<slug>/notebooks/...`), the editor's forward-auth endpoint and the API's
`/api/v1/notebooks/`."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.notebooks import api, auth, views

NB = "p/<slug:slug>/notebooks/"
ONE = NB + "<str:notebook_id>/"
urlpatterns = [
    path(NB, views.notebook_list, name="notebook-list"),
    path(NB + "new/", views.notebook_new, name="notebook-new"),
    path(ONE, views.notebook_detail, name="notebook-detail"),
    path(ONE + "status/", views.notebook_status, name="notebook-status"),
    path(ONE + "logs/", views.notebook_logs, name="notebook-logs"),
    path(ONE + "logs/download/", views.notebook_log_download, name="notebook-log-download"),
    path(ONE + "open/", views.notebook_open, name="notebook-open"),
    path(ONE + "<slug:action>/", views.notebook_action, name="notebook-action"),
    # Answered by engine/forward_auth.py before the host checks; routed here for reverse().
    path("auth/notebook/<uuid:notebook_id>", auth.notebook_auth, name="notebook-auth"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("notebooks", api.NotebookViewSet, basename="api-notebook")
