"""The site admins' billing pages (`/billing/`): the month's table of projects, a project's
drill-down (users → workloads → runs → a run's lines), the printable invoice, price history
and new prices, and closing, reopening and locking a month. Every table has a CSV equal to
it. Anyone else gets 404 (as the people pages); a signed-out visitor is sent to log in.
GETs only read the ledger."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import date
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone

from controlpanel.billing import admin_selectors as reads
from controlpanel.billing import admin_tables as tables
from controlpanel.billing.models import Period, PeriodState
from controlpanel.billing.rules import month_start, next_month
from controlpanel.billing.selectors import (
    current_month,
    invoice_lines,
    open_runs_since_recorded,
    period_state,
)
from controlpanel.billing.services import PeriodError, period_close, period_lock, period_reopen
from controlpanel.projects.access import site_admin_page
from controlpanel.projects.models import Project

PAGE_SIZE = 50
RULE = (
    "Only RUNNING time is billed: each started minute in full, one minute at least, at the "
    "flavor's price in effect at that minute's start, per unit. Months are calendar months "
    "in UTC. A locked month never changes: a later correction of its minutes is billed in "
    "the next open month as an adjustment line."
)
ACTIONS = {
    "close": "Close",
    "reopen": "Reopen",
    "lock": "Lock",
}


class BadRequest(Exception):
    """A query value that makes no sense: answered 400 with the message."""


def _bad(message: str) -> HttpResponse:
    return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")


def _month(text: str) -> date:
    try:
        return reads.month_parse(text)
    except ValueError as exc:
        raise BadRequest(f"month: {exc}") from None


def _query(request: HttpRequest, **changes: str | None) -> str:
    """The request's query string with some values changed (None drops one)."""
    params = {key: value for key, value in request.GET.items()}
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    return urlencode(params)


def answers_bad_requests(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """A BadRequest raised by the view (a query or path value that makes no sense) → 400."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return view(request, *args, **kwargs)
        except BadRequest as exc:
            return _bad(str(exc))

    return wrapper


# The month


def _selected_month(request: HttpRequest) -> date:
    text = request.GET.get("month")
    return current_month() if text is None else _month(text)


def _month_choices(month: date) -> list[date]:
    months = set(reads.months_with_lines()) | {current_month(), month}
    return sorted(months, reverse=True)


def _actions(month: date, state: str) -> list[tuple[str, str]]:
    if state == PeriodState.OPEN:
        return (
            [("close", "Close the month…")]
            if month_start(next_month(month)) <= timezone.now()
            else []
        )
    if state == PeriodState.CLOSED:
        return [("reopen", "Reopen…"), ("lock", "Lock for good…")]
    return []


@site_admin_page
@answers_bad_requests
def billing_month(request: HttpRequest) -> HttpResponse:
    month = _selected_month(request)
    rows = reads.month_projects(month=month)
    state = period_state(month=month)
    context = {
        "month": month,
        "previous": reads.previous_month(month),
        "next": next_month(month),
        "months": _month_choices(month),
        "table": tables.projects_table(month, rows),
        "total": reads.month_usage(rows),
        "state": state,
        "period": Period.objects.filter(month=month)
        .select_related("closed_by", "locked_by")
        .first(),
        "actions": _actions(month, state),
        "pending": open_runs_since_recorded(month=month) if month == current_month() else None,
        **common_context(),
    }
    return render(request, "billing/admin/month.html", context)


def common_context() -> dict[str, Any]:
    return {
        "rule": RULE,
        "currency": settings.CURRENCY,
        "tax_rate": settings.BILLING_TAX_RATE,
        "catch_up_s": settings.BILLING_CATCH_UP_SECONDS,
    }


@site_admin_page
@answers_bad_requests
def billing_month_csv(request: HttpRequest) -> HttpResponseBase:
    month = _selected_month(request)
    table = tables.projects_table(month, reads.month_projects(month=month))
    return tables.csv_response(table, f"billing-{month:%Y-%m}-projects.csv")


# A project's month


def _filters(request: HttpRequest) -> tuple[str | None, str | None]:
    user = request.GET.get("user") or None
    workload = request.GET.get("workload") or None
    if user is not None and len(user) > 150:
        raise BadRequest("user: a user name has at most 150 characters.")
    if workload is not None:
        try:
            workload = str(uuid.UUID(workload))
        except ValueError:
            raise BadRequest(
                f"workload: {workload[:40]!r} is not a workload id (a UUID)."
            ) from None
    return user, workload


def _project_month(month: str, slug: str) -> tuple[date, Project]:
    return _month(month), get_object_or_404(Project, slug=slug)


def _page(request: HttpRequest, rows: Any, key: str) -> Any:
    try:
        number = int(request.GET.get(key) or 1)
    except ValueError:
        raise BadRequest(f"{key}: {request.GET[key][:20]!r} is not a page number.") from None
    return Paginator(rows, PAGE_SIZE).get_page(number)


@site_admin_page
@answers_bad_requests
def billing_project(request: HttpRequest, month: str, slug: str) -> HttpResponse:
    first, project = _project_month(month, slug)
    user, workload = _filters(request)
    workloads = _page(
        request, reads.project_workloads(month=first, project=project, user=user), "wpage"
    )
    runs = _page(
        request,
        reads.project_runs(month=first, project=project, user=user, workload=workload),
        "rpage",
    )
    lines = invoice_lines(month=first, project=project)
    context = {
        "month": first,
        "project": project,
        "user_filter": user,
        "workload_filter": workload,
        "users": tables.users_table(
            first, project, reads.project_users(month=first, project=project)
        ),
        "workloads": tables.workloads_table(first, project, workloads.object_list),
        "workloads_page": workloads,
        "runs": tables.runs_table(first, project, runs.object_list),
        "runs_page": runs,
        "totals": reads.invoice_totals(lines),
        "state": period_state(month=first),
        "csv_query": _query(request, wpage=None, rpage=None),
        "wpage_prev": _query(request, wpage=str(workloads.number - 1)),
        "wpage_next": _query(request, wpage=str(workloads.number + 1)),
        "rpage_prev": _query(request, rpage=str(runs.number - 1)),
        "rpage_next": _query(request, rpage=str(runs.number + 1)),
        **common_context(),
    }
    return render(request, "billing/admin/project.html", context)


@site_admin_page
@answers_bad_requests
def billing_project_csv(
    request: HttpRequest, month: str, slug: str, table: str
) -> HttpResponseBase:
    first, project = _project_month(month, slug)
    user, workload = _filters(request)
    if table == "users":
        rows = tables.users_table(first, project, reads.project_users(month=first, project=project))
    elif table == "workloads":
        found = reads.project_workloads(month=first, project=project, user=user)
        rows = tables.workloads_table(first, project, iter(found))
    else:
        runs_found = reads.project_runs(month=first, project=project, user=user, workload=workload)
        rows = tables.runs_table(first, project, iter(runs_found))
    return tables.csv_response(rows, f"billing-{first:%Y-%m}-{project.slug}-{table}.csv")


def _run(month: str, slug: str, run_id: int) -> tuple[date, Project, Any]:
    first, project = _month(month), get_object_or_404(Project, slug=slug)
    run = reads.run_of_month(month=first, project=project, run_id=run_id)
    if run is None:
        raise Http404("No such run billed in this month.")
    return first, project, run


@site_admin_page
@answers_bad_requests
def billing_run(request: HttpRequest, month: str, slug: str, run_id: int) -> HttpResponse:
    first, project, run = _run(month, slug, run_id)
    lines = list(reads.run_lines(month=first, run=run))
    context = {
        "month": first,
        "project": project,
        "run": run,
        "table": tables.lines_table(lines),
        "usage": reads.usage_of(
            {
                "m": sum(line.minutes for line in lines),
                "um": 0,
                "gm": 0,
                "cm": 0,
                "p": sum(line.minutes * line.units * line.price_per_hour for line in lines),
                "adj": sum(line.is_adjustment for line in lines),
            }
        ),
        "other_months": reads.run_other_months(month=first, run=run),
        "estimated": bool(getattr(getattr(run, "sighting", None), "estimated", False)),
        **common_context(),
    }
    return render(request, "billing/admin/run.html", context)


@site_admin_page
@answers_bad_requests
def billing_run_csv(request: HttpRequest, month: str, slug: str, run_id: int) -> HttpResponseBase:
    first, project, run = _run(month, slug, run_id)
    table = tables.lines_table(reads.run_lines(month=first, run=run))
    return tables.csv_response(table, f"billing-{first:%Y-%m}-{project.slug}-run-{run.pk}.csv")


# The invoice


@site_admin_page
@answers_bad_requests
def billing_invoice(request: HttpRequest, month: str, slug: str) -> HttpResponse:
    first, project = _project_month(month, slug)
    lines = invoice_lines(month=first, project=project)
    state = period_state(month=first)
    context = {
        "month": first,
        "project": project,
        "table": tables.invoice_table(lines),
        "totals": reads.invoice_totals(lines),
        "state": state,
        "draft": state == PeriodState.OPEN,
        "issued": timezone.now(),
        **common_context(),
    }
    return render(request, "billing/admin/invoice.html", context)


@site_admin_page
@answers_bad_requests
def billing_invoice_csv(request: HttpRequest, month: str, slug: str) -> HttpResponseBase:
    first, project = _project_month(month, slug)
    table = tables.invoice_table(invoice_lines(month=first, project=project))
    return tables.csv_response(table, f"invoice-{first:%Y-%m}-{project.slug}.csv")


# Periods


def _period_move(action: str, month: date, user: Any) -> Period:
    if action == "close":
        return period_close(month=month, by=user)
    if action == "reopen":
        return period_reopen(month=month)
    return period_lock(month=month, by=user)


@site_admin_page
@answers_bad_requests
def billing_period(request: HttpRequest, month: str, action: str) -> HttpResponse:
    first = _month(month)
    error = ""
    if request.method == "POST":
        try:
            period = _period_move(action, first, request.user)
        except PeriodError as exc:
            error = str(exc)
        else:
            messages.success(request, f"{first:%Y-%m} is {period.state} now.")
            return redirect(f"{reverse('billing')}?month={first:%Y-%m}")
    rows = reads.month_projects(month=first)
    context = {
        "month": first,
        "action": action,
        "label": ACTIONS[action],
        "state": period_state(month=first),
        "total": reads.month_usage(rows),
        "projects": len(rows),
        "error": error,
        **common_context(),
    }
    return render(request, "billing/admin/period.html", context, status=400 if error else 200)
