"""Billing on the team's pages: the usage link of a project's managers, the budget banner of
a project's pages, the month's spend on the project page, "estimated" beside a cost."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse
from django.utils import timezone

from controlpanel.billing.budgets import BudgetStatus, budget_status, latest_alert
from controlpanel.billing.usage import is_estimated
from controlpanel.projects.models import Membership, Role

register = template.Library()


@register.simple_tag(takes_context=True)
def usage_link(context: Any) -> str:
    """The usage page of the current project for its managers (site admins have the admin
    billing pages in the navigation instead); empty otherwise."""
    project, user = context.get("current_project"), context.get("user")
    if project is None or user is None or user.is_staff:
        return ""
    access = context.get("current_access")
    if access is not None and access.project == project:
        manages = access.can_manage
    else:
        manages = Membership.objects.filter(project=project, user=user, role=Role.MANAGER).exists()
    return reverse("billing-usage", kwargs={"slug": project.slug}) if manages else ""


@register.inclusion_tag("billing/team/banner.html", takes_context=True)
def budget_banner(context: Any) -> dict[str, Any]:
    """The highest budget threshold alerted this month, on every page of the project (one
    query; only where the page is the project's)."""
    access = context.get("current_access")
    if access is None:
        return {}
    alert = latest_alert(project=access.project)
    return {"alert": alert, "access": access, "project": access.project}


@register.simple_tag
def project_month_spend(project: Any) -> BudgetStatus:
    """The project's spend this month (ledger plus open runs up to now) against its budget."""
    return budget_status(project=project, now=timezone.now())


@register.filter
def run_estimated(run: Any) -> bool:
    return is_estimated(run)
