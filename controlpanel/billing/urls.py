"""The site admins' billing pages (billing/admin_views.py). The teams' billing pages and the
usage API are billing/team_urls.py."""

from django.urls import path, register_converter

from controlpanel.billing import admin_prices
from controlpanel.billing import admin_views as views


class MonthConverter:
    """YYYY-MM in a path (the view says precisely what is wrong with 2025-13)."""

    regex = r"[0-9]{4}-[0-9]{2}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class _Choice:
    regex = ""

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class PeriodActionConverter(_Choice):
    regex = "close|reopen|lock"


class TableConverter(_Choice):
    regex = "users|workloads|runs"


register_converter(MonthConverter, "billing_month")
register_converter(PeriodActionConverter, "billing_action")
register_converter(TableConverter, "billing_table")

M = "billing/<billing_month:month>"
P = f"{M}/p/<slug:slug>"

urlpatterns = [
    path("billing/", views.billing_month, name="billing"),
    path("billing/projects.csv", views.billing_month_csv, name="billing-csv"),
    path("billing/prices/", admin_prices.billing_prices, name="billing-prices"),
    path("billing/prices.csv", admin_prices.billing_prices_csv, name="billing-prices-csv"),
    path(f"{M}/<billing_action:action>/", views.billing_period, name="billing-period"),
    path(f"{P}/", views.billing_project, name="billing-project"),
    path(f"{P}/<billing_table:table>.csv", views.billing_project_csv, name="billing-project-csv"),
    path(f"{P}/runs/<int:run_id>/", views.billing_run, name="billing-run"),
    path(f"{P}/runs/<int:run_id>/lines.csv", views.billing_run_csv, name="billing-run-csv"),
    path(f"{P}/invoice/", views.billing_invoice, name="billing-invoice"),
    path(f"{P}/invoice.csv", views.billing_invoice_csv, name="billing-invoice-csv"),
]
