"""The idle money pages: a project's (its managers, site admins) and every project's with the
unallocated capacity (site admins), each table with its CSV. They read the priced rows only
(idle_money.py): no GET asks Prometheus or the cluster."""

from __future__ import annotations

import csv
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from controlpanel.dashboards.filters import RANGES, dashboard_filters
from controlpanel.dashboards.idle_money import IdleMoney, idle_money
from controlpanel.dashboards.selectors import Scope, filter_choices
from controlpanel.projects.access import ProjectRequest, project_view, site_admin_page

COLUMNS: dict[str, list[tuple[str, str]]] = {
    "people": [
        ("project", "project"),
        ("person", "person"),
        ("idle_gpu_hours", "gpu_hours"),
        ("idle_cost", "cost"),
    ],
    "projects": [("project", "project"), ("idle_gpu_hours", "gpu_hours"), ("idle_cost", "cost")],
    "unallocated": [
        ("gpu_model", "gpu_model"),
        ("unallocated_gpu_hours", "gpu_hours"),
        ("list_price_per_gpu_hour", "price_per_gpu_hour"),
        ("value_at_list_price", "value"),
    ],
}


def _page(request: HttpRequest, scope: Scope, *, admin: bool) -> HttpResponse:
    f, problems = dashboard_filters(request.GET)
    for problem in problems.values():
        messages.error(request, problem)
    context = {
        "project": scope.project,
        "f": f,
        "ranges": RANGES,
        "choices": filter_choices(scope),
        "money": idle_money(scope, f, with_unallocated=admin),
        "admin": admin,
        "base": request.path,
    }
    return render(request, "dashboards/idle.html", context)


def _csv(request: HttpRequest, scope: Scope, table: str, *, admin: bool) -> HttpResponse:
    if table not in COLUMNS or (table == "unallocated" and not admin):
        raise Http404("No such table.")
    f, problems = dashboard_filters(request.GET)
    if problems:
        return HttpResponse(
            "\n".join(problems.values()), status=400, content_type="text/plain; charset=utf-8"
        )
    money = idle_money(scope, f, with_unallocated=admin)
    name = scope.project.slug if scope.project else "all-projects"
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    filename = f"{name}-idle-{table}-{f.first}-{f.last}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow([header for header, _ in COLUMNS[table]] + ["currency"])
    for row in _rows(money, table):
        cells = [_csv_cell(_exact(row.get(key))) for _, key in COLUMNS[table]]
        writer.writerow([*cells, money.currency])
    return response


def _csv_cell(value: Any) -> Any:
    """Text a spreadsheet would run as a formula is quoted with an apostrophe."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


def _rows(money: IdleMoney, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = getattr(money, table)
    return rows


def _exact(value: Any) -> Any:
    """Hours to 4 places, money to the cent's hundredth (what the ledger's minutes hold)."""
    if hasattr(value, "quantize"):
        return value.quantize(type(value)("0.0001"))
    return value


@project_view(manage=True)
def project_idle(request: ProjectRequest) -> HttpResponse:
    return _page(request, Scope(request.access.project), admin=False)


@project_view(manage=True)
def project_idle_csv(request: ProjectRequest, table: str) -> HttpResponse:
    return _csv(request, Scope(request.access.project), table, admin=False)


@site_admin_page
def all_idle(request: HttpRequest) -> HttpResponse:
    """Every project's idle money, and the unallocated capacity (site admins)."""
    return _page(request, Scope(None), admin=True)


@site_admin_page
def all_idle_csv(request: HttpRequest, table: str) -> HttpResponse:
    return _csv(request, Scope(None), table, admin=True)
