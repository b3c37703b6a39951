"""The teams' billing pages (the usage page and its budget form) and `/api/v1/usage/`. The
admins' billing pages are billing/urls.py."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.billing import api, team_views

urlpatterns = [
    path("p/<slug:slug>/usage/", team_views.usage_page, name="billing-usage"),
    path("p/<slug:slug>/usage/budget/", team_views.budget_update, name="billing-budget"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.view("usage/", api.UsageView.as_view(), name="api-usage")
