"""Each workload's month (WorkloadMonth): the lines of one workload billed in one month, summed
per flavor, so the admins' drill-down reads a row per workload instead of every line of the
project's month (users and workloads tables, their counts).

The one writer of lines (services._apply) calls `rollup_follow` with the run's lines before
and after its change: the difference is added to the rows it touches, as increments in one
statement each (`F() + n`), so two runs of one workload recorded at once both count, and the
rows always equal the ledger: money as exact decimals (Σ minutes × units × price per hour,
rounded by the pages as they round the lines), minutes and counts as integers. Rows are taken
in one order (their key's) by every writer, and only after the run's own row lock, so writers
never wait on each other in a circle. A month rebuilt from its runs (services.month_rebuild) is
summed afresh from its lines instead (`rollup_rebuild`), and a workload's deletion moves its
rows to the project's None rows (`rollup_forget_workload`), as its runs lose their workload.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import date
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, F, Q, Sum

from controlpanel.billing.models import Line, WorkloadMonth
from controlpanel.engine.models import JobRun

# (month billed in, project, workload or None, flavor)
Key = tuple[date, int, uuid.UUID | None, int]


@dataclass
class Sums:
    """What a set of lines adds to one row (`runs`: 1 when the run has lines there)."""

    minutes: int = 0
    unit_minutes: int = 0
    price_minutes: Decimal = Decimal(0)
    adjustments: int = 0
    lines: int = 0
    runs: int = 0

    def minus(self, other: Sums) -> Sums:
        return Sums(
            **{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
        )

    def values(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def contribution(lines: Iterable[Line], workload_id: uuid.UUID | None) -> dict[Key, Sums]:
    """What one run's lines add to the rollup (the run's workload given: lines do not
    carry it)."""
    sums: dict[Key, Sums] = defaultdict(Sums)
    for line in lines:
        row = sums[(line.period, line.project_id, workload_id, line.flavor_id)]
        row.minutes += line.minutes
        row.unit_minutes += line.minutes * line.units
        row.price_minutes += line.minutes * line.units * Decimal(line.price_per_hour)
        row.adjustments += line.period != line.of_period
        row.lines += 1
        row.runs = 1
    return dict(sums)


def rollup_follow(
    *, run: JobRun, before: dict[Key, Sums], after: Iterable[Line], skip: bool = False
) -> None:
    """Add to the rollup what the run's lines changed: `before` is `contribution()` of its
    lines as they were, `after` its lines now. `skip`: a rebuild sums the month afresh."""
    if skip:
        return
    now = contribution(after, run.job_id)
    for key in sorted(before.keys() | now.keys(), key=_order):
        change = now.get(key, Sums()).minus(before.get(key, Sums()))
        if any(change.values().values()):
            _add(key, change)


def _order(key: Key) -> tuple[date, int, str, int]:
    return (key[0], key[1], str(key[2] or ""), key[3])


def _rows(key: Key) -> Any:
    period, project_id, workload_id, flavor_id = key
    match: dict[str, Any] = {"workload_id": workload_id}  # None: the deleted workloads' row
    return WorkloadMonth.objects.filter(
        period=period, project_id=project_id, flavor_id=flavor_id, **match
    )


def _add(key: Key, change: Sums) -> None:
    """Add `change` to the key's row: an increment of the row (made when missing; if another
    transaction makes it meanwhile, the increment goes to theirs); a row left without lines is
    removed."""
    increments = {name: F(name) + value for name, value in change.values().items()}
    if not _rows(key).update(**increments):
        period, project_id, workload_id, flavor_id = key
        try:
            with transaction.atomic():
                WorkloadMonth.objects.create(
                    period=period,
                    project_id=project_id,
                    workload_id=workload_id,
                    flavor_id=flavor_id,
                    **change.values(),
                )
            return
        except IntegrityError:
            _rows(key).update(**increments)
    if change.lines < 0:
        _rows(key).filter(lines__lte=0).delete()


def rollup_rebuild(*, month: date) -> int:
    """Sum the month's rows afresh from its lines (the rows it had are replaced); how many."""
    with transaction.atomic():
        WorkloadMonth.objects.filter(period=month).delete()
        rows = [
            WorkloadMonth(period=month, **{k.removeprefix("total_"): v for k, v in row.items()})
            for row in _summed(month)
        ]
        WorkloadMonth.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


def _summed(month: date) -> Iterable[Mapping[str, Any]]:
    return (
        Line.objects.filter(period=month)
        .values("project_id", "flavor_id", workload_id=F("run__job_id"))
        .annotate(
            # other names than the lines' fields: an annotation named "minutes" would
            # stand for the field in the next one
            total_minutes=Sum("minutes"),
            total_unit_minutes=Sum(F("minutes") * F("units")),
            total_price_minutes=Sum(F("minutes") * F("units") * F("price_per_hour")),
            total_adjustments=Count("pk", filter=~Q(period=F("of_period"))),
            total_lines=Count("pk"),
            total_runs=Count("run", distinct=True),
        )
        .order_by()
    )


def rollup_forget_workload(*, workload_id: uuid.UUID) -> None:
    """Move a deleted workload's rows to its project's None rows (as its runs lose their
    workload). Its runs are locked first, as a recording does before touching the rollup, so
    a recording of one of them either counts before this move or sees the run without its
    workload."""
    list(JobRun.objects.select_for_update().filter(job_id=workload_id).order_by("pk").values("pk"))
    rows = WorkloadMonth.objects.filter(workload_id=workload_id)
    for row in sorted(rows, key=lambda r: (r.period, r.project_id, r.flavor_id)):
        moved = Sums(**{f.name: getattr(row, f.name) for f in fields(Sums)})
        _add((row.period, row.project_id, None, row.flavor_id), moved)
        row.delete()
