"""A run's training curve, stored append-only: one `CurvePoint` row per logged step.

A log update appends the new points (an insert each) and bumps a counter on the workload's row,
so its cost does not grow with the curve; rewriting a JSON list of every point did (30 KB of
write-ahead log per update at 2,000 points). What is read back is what the list was: every
logged point up to MAX_CURVE_POINTS, then every other one (`curve[::2]`, the shape kept),
applied by deleting every other row when the count passes the bound (once per ~1,000 appends).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from controlpanel.engine.models import CurvePoint, Workload

# Every logged step up to this many (a 10,000-step run logging every 10 steps fits whole).
MAX_CURVE_POINTS = 2000


def append(job: Workload, points: Iterable[list[Any]]) -> None:
    """Add points to the job's current curve (the caller holds the row and saves
    `curve_points`)."""
    pending: list[list[Any]] = []
    for point in points:
        pending.append(point)
        job.curve_points += 1
        if job.curve_points > MAX_CURVE_POINTS:
            _insert(job, pending)
            pending = []
            _halve(job)
    _insert(job, pending)


def replace(job: Workload, points: Iterable[list[Any]]) -> None:
    """The curve becomes `points` (a new run starts empty; seeds and tests set one whole)."""
    CurvePoint.objects.filter(job=job).delete()
    job.curve_points = 0
    append(job, points)
    Workload.objects.filter(pk=job.pk).update(curve_points=job.curve_points)


def read(job: Workload) -> list[list[Any]]:
    """The job's curve, oldest point first: [step, loss, tokens_per_s, learning_rate] each."""
    if job.pk is None:
        return []
    rows = CurvePoint.objects.filter(job_id=job.pk).order_by("id")
    return [list(point) for point in rows.values_list("point", flat=True)]


def _insert(job: Workload, points: list[list[Any]]) -> None:
    if points:
        CurvePoint.objects.bulk_create([CurvePoint(job=job, point=point) for point in points])


def _halve(job: Workload) -> None:
    """Keep every other point from the first (the list's `curve[::2]`)."""
    ids = list(CurvePoint.objects.filter(job=job).order_by("id").values_list("id", flat=True))
    CurvePoint.objects.filter(id__in=ids[1::2]).delete()
    job.curve_points = len(ids[::2])
