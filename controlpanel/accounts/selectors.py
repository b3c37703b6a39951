"""Reads for the settings page (your projects, roles and month's usage) and the people pages."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, F, Q, QuerySet, Sum
from django.utils import timezone

from controlpanel.accounts.models import GroupGrant, Invitation
from controlpanel.billing.models import Line
from controlpanel.billing.rules import amount
from controlpanel.billing.selectors import PRICE_MINUTES
from controlpanel.projects.models import Membership, Project


@dataclass(frozen=True)
class ProjectUsage:
    """One project's share of a user's month: minutes, GPU-or-unit minutes and money."""

    project: Project
    minutes: int
    unit_minutes: int
    amount: Decimal


@dataclass(frozen=True)
class Usage:
    month: date
    projects: list[ProjectUsage]
    currency: str

    @property
    def minutes(self) -> int:
        return sum(p.minutes for p in self.projects)

    @property
    def amount(self) -> Decimal:
        return sum((p.amount for p in self.projects), Decimal(0))


def user_month_usage(*, user: Any, month: date) -> Usage:
    """What the user's own workloads billed in `month` (the ledger's lines whose run belongs
    to a workload they own), by project; rounded to the cent per project, as invoices are.
    Runs of a workload deleted since are no longer anyone's (their lines stay the project's)."""
    rows = (
        Line.objects.filter(period=month, run__job__owner=user)
        .values("project_id")
        .annotate(m=Sum("minutes"), um=Sum(F("minutes") * F("units")), p=PRICE_MINUTES)
        .order_by("project_id")
    )
    projects = Project.objects.in_bulk([row["project_id"] for row in rows])
    shares = [
        ProjectUsage(
            project=projects[row["project_id"]],
            minutes=row["m"] or 0,
            unit_minutes=row["um"] or 0,
            amount=amount(Decimal(row["p"] or 0)),
        )
        for row in rows
    ]
    shares.sort(key=lambda share: share.project.name)
    return Usage(month=month, projects=shares, currency=settings.CURRENCY)


def memberships_of(*, user: Any) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("project").order_by("project__name")


def group_grants_of(*, user: Any) -> dict[int, GroupGrant]:
    """Project id → the grant, for memberships the group mapping gave."""
    return {g.project_id: g for g in GroupGrant.objects.filter(user=user)}


def pending_invitations(*, project: Project) -> list[Invitation]:
    """The project's invitations still waiting (not used, revoked or expired)."""
    return list(
        Invitation.objects.filter(
            project=project, accepted_at=None, revoked_at=None, expires_at__gt=timezone.now()
        )
        .select_related("invited_by")
        .order_by("-created_at")
    )


def grants_in(*, project: Project) -> dict[int, GroupGrant]:
    """User id → the grant, for this project's memberships the group mapping gave."""
    return {g.user_id: g for g in GroupGrant.objects.filter(project=project)}


def people(*, query: str = "") -> QuerySet[Any]:
    """Every account for the admin's list, searchable by name or address."""
    users = (
        get_user_model()
        .objects.annotate(project_count=Count("memberships"))
        .order_by("-is_active", "username")
    )
    query = query.strip()
    if query:
        users = users.filter(
            Q(username__icontains=query)
            | Q(email__icontains=query)
            | Q(first_name__icontains=query)
            | Q(last_name__icontains=query)
        )
    return users
