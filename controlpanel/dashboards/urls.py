"""Dashboards: a project's (its managers, admins) and every project's (admins); the capacity
view and `/api/v1/capacity/` (admins)."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.dashboards import api, views

urlpatterns = [
    path("p/<slug:slug>/dashboard/", views.project_dashboard, name="dashboard"),
    path(
        "p/<slug:slug>/dashboard/<slug:table>.csv",
        views.project_dashboard_csv,
        name="dashboard-csv",
    ),
    path("dashboard/", views.all_dashboard, name="dashboard-all"),
    path("dashboard/capacity/", views.capacity_view, name="dashboard-capacity"),
    path("dashboard/<slug:table>.csv", views.all_dashboard_csv, name="dashboard-all-csv"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.view("capacity/", api.CapacityView.as_view(), name="api-capacity")
