"""The teams' side of billing: a project's usage page (its managers and site admins) with
the month's spend by user, workload and flavor, the budget with its forecast and alerts, and
the budget form. Only reads on GET (nothing is recorded by a page view)."""

from __future__ import annotations

from datetime import date
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from controlpanel.billing import budgets
from controlpanel.billing.rules import month_of, month_start, next_month
from controlpanel.billing.templatetags.money import exact_amount
from controlpanel.billing.usage import DAY, month_forecast
from controlpanel.billing.usage_grouped import (
    Row,
    UsageQuery,
    parse_month,
    rollup,
    total_of,
    usage_months,
    usage_rows,
)
from controlpanel.engine.models import Workload
from controlpanel.kinds import KINDS
from controlpanel.projects.access import ProjectRequest, project_view


class BudgetForm(forms.Form):
    """The monthly budget (the service checks the amount) and the opt-in stop."""

    monthly_budget = forms.CharField(
        label=f"Monthly budget ({settings.CURRENCY})",
        max_length=20,
        help_text="0 for none. Alerts at 50, 80 and 100 %; at 100 % new launches wait.",
        widget=forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off"}),
    )
    budget_stops_running = forms.BooleanField(
        label="Also stop running work when the budget is reached", required=False
    )


@project_view(manage=True)
def usage_page(request: ProjectRequest) -> HttpResponse:
    project = request.access.project
    now = timezone.now()
    current = month_of(now)
    try:
        month = parse_month(request.GET.get("month") or f"{current:%Y-%m}")
    except ValueError as exc:
        return HttpResponse(f"month: {exc}", status=400, content_type="text/plain")
    form = BudgetForm(
        initial={
            "monthly_budget": project.monthly_budget,
            "budget_stops_running": project.budget_stops_running,
        }
    )
    return render(request, "billing/team/usage.html", _context(request, month, form))


def _context(request: ProjectRequest, month: date, form: BudgetForm) -> dict[str, Any]:
    project = request.access.project
    now = timezone.now()
    current = month_of(now)
    query = UsageQuery(
        start=month,
        end=month_start(next_month(month)).date() - DAY,
        projects=frozenset({project.pk}),
    )
    rows = usage_rows(query, now)
    named = {row.key[3] for row in rows if row.key[3]}
    alive = {str(pk) for pk in Workload.objects.filter(pk__in=named).values_list("pk", flat=True)}
    months = sorted(set(usage_months(project=project)) | {current, month}, reverse=True)
    previous = month_of(month_start(month) - DAY)
    return {
        "project": project,
        "month": month,
        "is_current": month == current,
        "months": months,
        "previous": previous if previous in months else None,
        "following": next_month(month) if next_month(month) in months else None,
        "tables": [
            (by, by, [_shown(row, by, project.slug, alive) for row in rollup(rows, by)])
            for by in ("user", "workload", "flavor")
        ],
        "total": total_of(rows),
        "currency": settings.CURRENCY,
        "status": budgets.budget_status(project=project, now=now) if month == current else None,
        "forecast": month_forecast(project=project, now=now) if month == current else None,
        "alerts": budgets.alerts_of(project=project, month=month),
        "form": form,
        "thresholds": budgets.THRESHOLDS,
    }


def _shown(row: Row, by: str, slug: str, alive: set[str]) -> dict[str, Any]:
    """A rolled-up row as the page shows it: its label (and the workload's page, while it
    exists; a deleted one keeps its name, kept by the ledger, and says it was deleted)."""
    _, _, user, workload, name, kind, flavor = row.key
    url = None
    if by == "user":
        label = user or "(no owner)"
    elif by == "flavor":
        label = flavor
    else:
        label = name or (workload or "")[:8] or "(no workload)"
        if workload and workload not in alive:
            label = f"{label} (deleted)"
        elif workload and kind in KINDS:  # its page: `<kind>-detail` with `<kind>_id`
            url = reverse(f"{kind}-detail", kwargs={"slug": slug, f"{kind}_id": workload})
    return {
        "label": label,
        "kind": kind,
        "url": url,
        "minutes": row.minutes,
        "gpu_hours": row.gpu_hours,
        "amount": exact_amount(row),  # shown to the hundredth of a cent: templatetags/money
        "estimated": row.estimated,
    }


@require_POST
@project_view(manage=True)
def budget_update(request: ProjectRequest) -> HttpResponse:
    """Set the project's monthly budget; a raised budget lets waiting launches start."""
    from controlpanel.engine.tasks import admit_soon

    access = request.access
    form = BudgetForm(request.POST)
    if form.is_valid():
        try:
            budgets.budget_set(
                access=access,
                amount=form.cleaned_data["monthly_budget"],
                stops_running=form.cleaned_data["budget_stops_running"],
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            admit_soon(access.project.pk)
            messages.success(request, "Budget saved.")
            return redirect(reverse("billing-usage", kwargs={"slug": access.project.slug}))
    month = month_of(timezone.now())
    context = _context(request, month, form)
    return render(request, "billing/team/usage.html", context, status=400)
