"""Dashboard pages: one project's (its managers, and admins) and every project's (admins).

They read rows only (rollups, workloads, the billing ledger): no GET talks to the cluster.
The numbers part refreshes itself through htmx; every table has a CSV export; the URL
carries the range and filters, so a view can be shared.
"""

from __future__ import annotations

import csv
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django.utils import timezone
from django_htmx.http import HttpResponseClientRedirect

from controlpanel.core.htmx import wants_fragment
from controlpanel.core.install import install_id
from controlpanel.dashboards import capacity, charts, selectors, tables
from controlpanel.dashboards.filters import RANGES, DashboardFilters, dashboard_filters
from controlpanel.dashboards.selectors import Scope, Usage
from controlpanel.dashboards.utilisation import Utilisation, dashboard_utilisation
from controlpanel.engine.backend import get_backend
from controlpanel.projects.access import ProjectRequest, project_view, site_admin_page

REFRESH_SECONDS = 30


def _tables(scope: Scope, f: DashboardFilters, usage: Usage) -> dict[str, list[dict[str, Any]]]:
    return {
        "top": tables.top_by_cost(scope, f, usage),
        "waiting": tables.waiting_now(scope, f),
        "idle": tables.idle_notebooks(scope, f),
        "failures": tables.recent_failures(scope, f),
    }


def _with_utilisation(rows: list[dict[str, Any]], found: Utilisation) -> list[dict[str, Any]]:
    """Each row's mean GPU utilisation over the range (None: no data)."""
    return [row | {"utilisation": found.of(row["id"])} for row in rows]


def _context(scope: Scope, f: DashboardFilters) -> dict[str, Any]:
    usage = Usage(scope, f)
    utilisation = dashboard_utilisation(scope, f)
    tables = _tables(scope, f, usage)
    tables["top"] = _with_utilisation(tables["top"], utilisation["found"])
    return {
        "scope": scope,
        "f": f,
        "headline": charts.headline(scope, f, usage),
        "spend": selectors.month_spend(scope),
        "charts": charts.charts(scope, f, usage),
        "tables": tables,
        "rolled_up_at": selectors.rolled_up_at(f),
        "now": timezone.now(),
        "refresh_s": REFRESH_SECONDS,
        "utilisation": utilisation,
    }


def _render(request: HttpRequest, scope: Scope, base: str) -> HttpResponseBase:
    f, problems = dashboard_filters(request.GET)
    if problems and wants_fragment(request):
        return HttpResponseClientRedirect(request.get_full_path())
    for problem in problems.values():
        messages.error(request, problem)
    context = _context(scope, f) | {
        "base": base,
        "ranges": RANGES,
        "choices": selectors.filter_choices(scope),
        "project": scope.project,
    }
    if wants_fragment(request):
        return render(request, "dashboards/dashboard.html#numbers", context)
    return render(request, "dashboards/dashboard.html", context)


@project_view(manage=True)
def project_dashboard(request: ProjectRequest) -> HttpResponseBase:
    return _render(request, Scope(request.access.project), request.path)


@site_admin_page
def all_dashboard(request: HttpRequest) -> HttpResponseBase:
    """Every project's numbers (site admins)."""
    return _render(request, Scope(None), request.path)


@site_admin_page
def capacity_view(request: HttpRequest) -> HttpResponseBase:
    """GPUs by model and flavor, the queue per flavor, nodes taking no work (site admins);
    an htmx poll gets the figures alone, every REFRESH_SECONDS while the tab is visible."""
    context = capacity.capacity_figures() | {
        "backend": get_backend().name,
        "refresh_s": REFRESH_SECONDS,
        "install_id": install_id(),
    }
    if wants_fragment(request):
        return render(request, "dashboards/capacity.html#figures", context)
    return render(request, "dashboards/capacity.html", context)


def _columns(*names: str) -> list[tuple[str, str]]:
    """(CSV header, row key) pairs: the header is the key unless written `header:key`."""
    return [(name.split(":")[0], name.split(":")[-1]) for name in names]


COLUMNS: dict[str, list[tuple[str, str]]] = {
    "top": _columns(
        "project",
        "id",
        "name",
        "kind",
        "owner",
        "flavor",
        "gpu_hours",
        "cost",
        "gpu_util_percent:utilisation",
    ),
    "waiting": _columns(
        "position",
        "project",
        "id",
        "name",
        "kind",
        "owner",
        "flavor",
        "gpus",
        "waiting_s",
        "reason",
    ),
    "idle": _columns("project", "id", "name", "owner", "flavor", "idle_s", "stops_in_s"),
    "failures": _columns(
        "project",
        "id",
        "name",
        "kind",
        "owner",
        "state",
        "finished_at",
        "exit_code:exit",
        "reason",
    ),
}
CHART_TABLES = ("gpu-hours", "cost", "final-states", "queue-wait", "throughput")


def _csv_cell(value: Any) -> Any:
    """Text a spreadsheet would run as a formula is quoted with an apostrophe."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return "" if value is None else value


def _csv(scope: Scope, request: HttpRequest, table: str) -> HttpResponse:
    f, problems = dashboard_filters(request.GET)
    if problems:
        return HttpResponse(
            "\n".join(problems.values()), status=400, content_type="text/plain; charset=utf-8"
        )
    usage = Usage(scope, f)
    name = scope.project.slug if scope.project else "all-projects"
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    filename = f"{name}-{table}-{f.first}-{f.last}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    if table in COLUMNS:
        rows = _tables_one(scope, f, usage, table)
        writer.writerow([header for header, _ in COLUMNS[table]])
        for row in rows:
            writer.writerow([_csv_cell(row.get(key)) for _, key in COLUMNS[table]])
        return response
    chart = charts.charts(scope, f, usage)[table]
    writer.writerow(["label", *[_csv_cell(s["name"]) for s in chart["series"]]])
    for n, label in enumerate(chart["labels"]):
        writer.writerow([_csv_cell(label), *[_csv_cell(s["data"][n]) for s in chart["series"]]])
    return response


def _tables_one(
    scope: Scope, f: DashboardFilters, usage: Usage, table: str
) -> list[dict[str, Any]]:
    if table == "top":
        found = dashboard_utilisation(scope, f)["found"]
        return _with_utilisation(tables.top_by_cost(scope, f, usage), found)
    if table == "waiting":
        return tables.waiting_now(scope, f)
    if table == "idle":
        return tables.idle_notebooks(scope, f)
    return tables.recent_failures(scope, f)


def _known(table: str) -> None:
    if table not in COLUMNS and table not in CHART_TABLES:
        raise Http404("No such table.")


@project_view(manage=True)
def project_dashboard_csv(request: ProjectRequest, table: str) -> HttpResponse:
    _known(table)
    return _csv(Scope(request.access.project), request, table)


@site_admin_page
def all_dashboard_csv(request: HttpRequest, table: str) -> HttpResponse:
    _known(table)
    return _csv(Scope(None), request, table)
