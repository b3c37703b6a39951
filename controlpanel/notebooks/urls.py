"""Notebook pages (`/p/<slug>/notebooks/...`) and the API's `/api/v1/notebooks/` (the editor
itself is served on its own host: controlpanel/usercontent)."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.notebooks import api, views

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
]


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("notebooks", api.NotebookViewSet, basename="api-notebook")
