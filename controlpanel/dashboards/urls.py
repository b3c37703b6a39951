"""Dashboards: a project's (its managers, admins) and every project's (admins), each with its
idle GPUs in money; the capacity view and `/api/v1/capacity/` (admins)."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.dashboards import api, idle_views, views

urlpatterns = [
    path("p/<slug:slug>/dashboard/", views.project_dashboard, name="dashboard"),
    path(
        "p/<slug:slug>/dashboard/<slug:table>.csv",
        views.project_dashboard_csv,
        name="dashboard-csv",
    ),
    path("p/<slug:slug>/dashboard/idle/", idle_views.project_idle, name="dashboard-idle"),
    path(
        "p/<slug:slug>/dashboard/idle/<slug:table>.csv",
        idle_views.project_idle_csv,
        name="dashboard-idle-csv",
    ),
    path("dashboard/", views.all_dashboard, name="dashboard-all"),
    path("dashboard/idle/", idle_views.all_idle, name="dashboard-all-idle"),
    path("dashboard/idle/<slug:table>.csv", idle_views.all_idle_csv, name="dashboard-all-idle-csv"),
    path("dashboard/capacity/", views.capacity_view, name="dashboard-capacity"),
    path("dashboard/<slug:table>.csv", views.all_dashboard_csv, name="dashboard-all-csv"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.view("capacity/", api.CapacityView.as_view(), name="api-capacity")
