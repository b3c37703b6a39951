"""Sweep, compare and adapter pages (`/p/<slug>/sweeps/...`, `/p/<slug>/compare/`,
`/p/<slug>/adapters/`) and the API's `/api/v1/sweeps/` and `/api/v1/adapters/`."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.sweeps import api, views

P = "p/<slug:slug>/"

urlpatterns = [
    path(P + "sweeps/", views.sweep_list, name="sweep-list"),
    path(P + "sweeps/new/", views.sweep_new, name="sweep-new"),
    path(P + "sweeps/<str:sweep_id>/", views.sweep_detail, name="sweep-detail"),
    path(P + "sweeps/<str:sweep_id>/stop/", views.sweep_stop, name="sweep-stop"),
    path(P + "compare/", views.compare, name="compare"),
    path(P + "compare.csv", views.compare_csv, name="compare-csv"),
    path(P + "adapters/", views.adapter_list, name="adapter-list"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("sweeps", api.SweepViewSet, basename="api-sweep")
    routes.viewset("adapters", api.AdapterViewSet, basename="api-adapter")
