"""A project's monthly budget (`Project.monthly_budget`, in settings.CURRENCY; 0 = none).

Spend is the month's ledger plus what open runs ran since their last recording (usage.py).
At 50, 80 and 100 % an alert goes out once per month and threshold: a `BudgetAlert` row per
(project, month, threshold) under a unique constraint decides which of several concurrent
checks sends it (the others' inserts fail and send nothing). At 100 % admission holds new
launches (`hold_reason`, read by workloads/admission.py) until the budget is raised or the
month ends; a project that opted in (`budget_stops_running`) also has its running work
stopped. Checks run where recording happens (the billing receivers queue one, the catch-up
task checks every budgeted project) and at admission.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_DOWN, Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlpanel import audit
from controlpanel.billing.models import BudgetAlert
from controlpanel.billing.rules import month_of
from controlpanel.billing.selectors import Total
from controlpanel.billing.usage import month_spend
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project

THRESHOLDS = (50, 80, 100)
MAX_BUDGET = Decimal("9999999999.99")  # the field's 12 digits, 2 after the point


@dataclass(frozen=True)
class BudgetStatus:
    """Where a project stands against its budget this month."""

    project: Project
    month: date
    budget: Decimal
    spent: Total

    @property
    def amount(self) -> Decimal:
        return self.spent.amount

    @property
    def percent(self) -> int:
        """Whole percent used, rounded down (99.99 % is not 100 %)."""
        if not self.budget:
            return 0
        return int((self.amount * 100 / self.budget).to_integral_value(ROUND_DOWN))

    @property
    def crossed(self) -> list[int]:
        """The thresholds reached (spend ≥ threshold % of the budget), exact decimals."""
        if not self.budget:
            return []
        return [t for t in THRESHOLDS if self.amount * 100 >= self.budget * t]

    @property
    def reached(self) -> bool:
        return 100 in self.crossed

    def say(self) -> str:
        """'Budget of 500.00 EUR for December 2025 reached (512.40 EUR spent)'."""
        return (
            f"Budget of {self.budget:.2f} {settings.CURRENCY} for {self.month:%B %Y} reached "
            f"({self.amount:.2f} {settings.CURRENCY} spent)"
        )


def budget_status(*, project: Project, now: datetime | None = None) -> BudgetStatus:
    """The month's spend so far (whether or not the project has a budget) against it."""
    now = now or timezone.now()
    month = month_of(now)
    spent = month_spend(project=project, month=month, now=now)
    return BudgetStatus(project, month, project.monthly_budget, spent)


def hold_reason(*, project: Project, now: datetime | None = None) -> str | None:
    """Why the project's new launches wait (its budget is reached this month), else None.
    No query for a project without a budget."""
    if not project.monthly_budget:
        return None
    status = budget_status(project=project, now=now)
    if not status.reached:
        return None
    return f"{status.say()}: new launches wait until the budget is raised or the month ends"


@dataclass(frozen=True)
class Outcome:
    """What a check found: the alerts it made (to send) and whether running work must stop."""

    status: BudgetStatus
    new_alerts: list[int]
    stop_running: bool


def budget_check(*, project_id: int, now: datetime | None = None) -> Outcome | None:
    """Make the alerts of the thresholds crossed this month that were never made; exactly
    once each, however many checks run at once (the unique constraint; a loser's insert
    waits for the winner's commit, then fails). None: no such project, or no budget."""
    project = Project.objects.filter(pk=project_id).first()
    if project is None or not project.monthly_budget:
        return None
    status = budget_status(project=project, now=now)
    made = set(
        BudgetAlert.objects.filter(project=project, month=status.month).values_list(
            "threshold", flat=True
        )
    )
    new: list[int] = []
    for threshold in status.crossed:
        if threshold in made:
            continue
        try:
            with transaction.atomic():
                alert = BudgetAlert.objects.create(
                    project=project,
                    month=status.month,
                    threshold=threshold,
                    budget=status.budget,
                    spent=status.amount,
                    currency=settings.CURRENCY,
                )
        except IntegrityError:
            continue  # another check made it (and sends it)
        new.append(alert.pk)
    return Outcome(status, new, status.reached and project.budget_stops_running)


def alerts_of(*, project: Project, month: date) -> list[BudgetAlert]:
    return list(BudgetAlert.objects.filter(project=project, month=month).order_by("threshold"))


def latest_alert(*, project: Project, now: datetime | None = None) -> BudgetAlert | None:
    """The highest threshold alerted this month (the project pages' banner): one query."""
    month = month_of(now or timezone.now())
    return BudgetAlert.objects.filter(project=project, month=month).order_by("-threshold").first()


def budget_set(*, access: ProjectAccess, amount: Any, stops_running: bool) -> Project:
    """Set the project's monthly budget (managers and admins). A budget raised above the
    spend lets queued launches start: the task layer admits the project after this."""
    if not access.can_manage:
        raise ValidationError("Only the project's managers can set its budget.")
    budget = parse_budget(amount)
    project = access.project
    project.monthly_budget = budget
    project.budget_stops_running = bool(stops_running)
    project.save(update_fields=["monthly_budget", "budget_stops_running"])
    audit.record(
        "budget.set",
        actor=None,
        project=project,
        target=project,
        amount=budget,
        stops_running=project.budget_stops_running,
    )
    return project


def parse_budget(value: Any) -> Decimal:
    """A budget from a form or the API: 0 or more, at most 2 decimals."""
    text = str(value if value is not None else "").strip()
    try:
        budget = Decimal(text)
    except InvalidOperation:
        raise ValidationError(
            {"monthly_budget": f"{text!r} is not an amount: write it like 500 or 500.00."}
        ) from None
    if not budget.is_finite() or budget < 0:
        raise ValidationError({"monthly_budget": "The budget is 0 (none) or more."})
    if budget != budget.quantize(Decimal("0.01")):
        raise ValidationError({"monthly_budget": "Use at most 2 decimals (cents)."})
    if budget > MAX_BUDGET:
        raise ValidationError({"monthly_budget": f"The budget is at most {MAX_BUDGET}."})
    return budget.quantize(Decimal("0.01"))
