"""The admins' month of billing: each project's usage billed in a month (its amount the sum
of its invoice lines, `selectors.invoice_lines`), the month before, the change, and the month's
total; and the sums of lines (or of the rollup's rows) the drill-down reads too
(billing/admin_selectors.py).

Everything is summed in PostgreSQL; only integers are summed per invoice line, so money is
exact and rounded to the cent once per invoice line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import Case, Count, F, Q, Sum, When

from controlpanel.billing.models import Line
from controlpanel.billing.rules import CENT, amount
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project

MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")
FIRST_YEAR, LAST_YEAR = 2000, 2999

# Σ over lines; GPU-minutes: minutes × units × GPUs per unit; CPU-minutes: minutes × units ×
# vCPUs per unit of flavors without a GPU (their vCPUs are what is sold).
SUMS: dict[str, Any] = {
    "m": Sum("minutes"),
    "um": Sum(F("minutes") * F("units")),
    "gm": Sum(F("minutes") * F("units") * F("flavor__gpus_per_unit")),
    "cm": Sum(
        Case(
            When(
                flavor__gpus_per_unit=0,
                then=F("minutes") * F("units") * F("flavor__vcpu_per_unit"),
            ),
            default=0,
        )
    ),
    "p": Sum(F("minutes") * F("units") * F("price_per_hour")),
    "adj": Count("pk", filter=~Q(period=F("of_period"))),
}
# A run's row shows its minutes, money and adjustments (its GPU- and CPU-minutes are not).
RUN_SUMS = {name: SUMS[name] for name in ("m", "um", "p", "adj")}
# The same sums over the rollup's rows (billing/rollup.py), which hold them per flavor.
MONTH_SUMS: dict[str, Any] = {
    "m": Sum("minutes"),
    "um": Sum("unit_minutes"),
    "gm": Sum(F("unit_minutes") * F("flavor__gpus_per_unit")),
    "cm": Sum(
        Case(
            When(flavor__gpus_per_unit=0, then=F("unit_minutes") * F("flavor__vcpu_per_unit")),
            default=0,
        )
    ),
    "p": Sum("price_minutes"),
    "adj": Sum("adjustments"),
}


def month_parse(text: str) -> date:
    """'YYYY-MM' → the month's first day; ValueError saying what is wrong."""
    found = MONTH_RE.match(text)
    if not found:
        raise ValueError(f"{text[:20]!r} is not a month: write it as YYYY-MM, e.g. 2025-01.")
    year, month = int(found[1]), int(found[2])
    if not 1 <= month <= 12:
        raise ValueError(f"{text!r}: the month must be 01 to 12.")
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise ValueError(f"{text!r}: the year must be {FIRST_YEAR} to {LAST_YEAR}.")
    return date(year, month, 1)


def previous_month(month: date) -> date:
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def hours(minutes: int) -> Decimal:
    return (Decimal(minutes) / 60).quantize(CENT, ROUND_HALF_UP)


@dataclass
class Usage:
    """Sums of some lines. `amount` is set by whoever knows how it is rounded."""

    minutes: int = 0
    unit_minutes: int = 0
    gpu_minutes: int = 0
    cpu_minutes: int = 0
    price_minutes: Decimal = Decimal(0)
    adjustments: int = 0
    amount: Decimal = Decimal("0.00")

    def add(self, row: dict[str, Any]) -> None:
        self.minutes += row["m"] or 0
        self.unit_minutes += row["um"] or 0
        self.gpu_minutes += row.get("gm") or 0
        self.cpu_minutes += row.get("cm") or 0
        self.price_minutes += Decimal(row["p"] or 0)
        self.adjustments += row["adj"] or 0

    @property
    def gpu_hours(self) -> Decimal:
        return hours(self.gpu_minutes)

    @property
    def cpu_hours(self) -> Decimal:
        return hours(self.cpu_minutes)


def usage_of(row: dict[str, Any]) -> Usage:
    """One aggregated row (SUMS) as usage, rounded once."""
    usage = Usage()
    usage.add(row)
    usage.amount = amount(usage.price_minutes)
    return usage


@dataclass
class ProjectMonth:
    """One row of the month's table."""

    project: Project
    usage: Usage = field(default_factory=Usage)
    previous: Decimal = Decimal("0.00")

    @property
    def change(self) -> Decimal:
        return self.usage.amount - self.previous

    @property
    def change_percent(self) -> Decimal | None:
        if not self.previous:
            return None
        return (self.change * 100 / self.previous).quantize(Decimal("0.1"), ROUND_HALF_UP)


def _invoiced(month: date) -> dict[int, Usage]:
    """Each project's usage billed in `month`, its amount the sum of its invoice lines. The
    lines alone are read, and only integers are summed: the price and the flavor are keys of
    each group, so its money is Σ minutes × units times the price, exactly."""
    groups: Any = (
        Line.objects.filter(period=month)
        .values("project_id", "flavor_id", "price_per_hour", "units", "of_period")
        .annotate(m=Sum("minutes"), lines=Count("pk"))
        .order_by()
    )
    flavors = {f.pk: f for f in Flavor.objects.only("gpus_per_unit", "vcpu_per_unit")}
    usage: dict[int, Usage] = {}
    for row in groups:
        flavor, unit_minutes = flavors[row["flavor_id"]], row["m"] * row["units"]
        row["um"], row["p"] = unit_minutes, unit_minutes * row["price_per_hour"]
        row["gm"] = unit_minutes * flavor.gpus_per_unit
        row["cm"] = 0 if flavor.gpus_per_unit else unit_minutes * flavor.vcpu_per_unit
        row["adj"] = row["lines"] if row["of_period"] != month else 0
        project = usage.setdefault(row["project_id"], Usage())
        project.add(row)
        project.amount += amount(Decimal(row["p"]))
    return usage


def month_projects(*, month: date) -> list[ProjectMonth]:
    """Every project billed in `month` or the month before, by amount (largest first)."""
    now, before = _invoiced(month), _invoiced(previous_month(month))
    projects = Project.objects.in_bulk(set(now) | set(before))
    rows = [
        ProjectMonth(
            project=project,
            usage=now.get(pk, Usage()),
            previous=before[pk].amount if pk in before else Decimal("0.00"),
        )
        for pk, project in projects.items()
    ]
    rows.sort(key=lambda row: (-row.usage.amount, row.project.slug))
    return rows


def month_usage(rows: Iterable[ProjectMonth]) -> Usage:
    """The month's total: the sum of its projects' rows."""
    total = Usage()
    for row in rows:
        for name in ("minutes", "unit_minutes", "gpu_minutes", "cpu_minutes", "adjustments"):
            setattr(total, name, getattr(total, name) + getattr(row.usage, name))
        total.price_minutes += row.usage.price_minutes
        total.amount += row.usage.amount
    return total
