"""The idle policy's rule, without I/O: a project's policy, a workload's GPU samples folded into
one point a minute, and since when its GPUs sit idle.

A minute's point is idle when its busiest GPU is below the threshold: a notebook that keeps
one GPU of two busy is in use, and the policy never reclaims a GPU that works (dstack's
`utilization_policy` asks the same of every GPU). Idle money counts each GPU apart instead
(the share of a workload's GPUs below the threshold that minute).

No data is not idle: without a sample, or with none recent, nothing is judged; a gap in the
samples ends an idle stretch (the stretch after it counts from its first sample)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from controlpanel.dashboards.dcgm import STEP_S, GpuSeries

# A sample older than this is no news of now (Prometheus's own look-back for a series).
STALE = timedelta(minutes=5)
# Two evaluations further apart than this had none between them: a gap.
GAP_S = 2 * STEP_S
# The samples a check reads beyond the policy's minutes and grace.
MARGIN = timedelta(minutes=10)
JOB_ACTIONS = {"warn": "warn only", "stop": "stop"}


@dataclass(frozen=True)
class Policy:
    """A project's idle policy: below `percent` for `minutes`, warn; `grace` minutes later,
    act (jobs: as `jobs` says). `minutes` 0: off (idle money still uses `percent`)."""

    percent: int
    minutes: int
    grace: int
    jobs: str

    @classmethod
    def of(cls, project: Any) -> Policy:
        return cls(
            percent=project.gpu_idle_percent,
            minutes=project.gpu_idle_minutes,
            grace=project.gpu_idle_grace_minutes,
            jobs=project.gpu_idle_jobs,
        )

    @property
    def on(self) -> bool:
        return self.minutes > 0

    @property
    def lookback(self) -> timedelta:
        return timedelta(minutes=self.minutes + self.grace) + MARGIN


@dataclass(frozen=True)
class Point:
    """One evaluation of a workload's GPUs: its busiest GPU (percent), how many GPUs had a
    value, and how many of those sat below the threshold."""

    at: int
    busiest: float
    gpus: int
    idle: int

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.at, tz=UTC)


def points_of(series: Iterable[GpuSeries], *, percent: float) -> list[Point]:
    """The workload's GPUs folded into one point per evaluation time, in time order."""
    values: dict[int, list[float]] = defaultdict(list)
    for one in series:
        for at, value in one.points.items():
            values[at].append(value)
    return [
        Point(at=at, busiest=max(vs), gpus=len(vs), idle=sum(1 for v in vs if v < percent))
        for at, vs in sorted(values.items())
    ]


@dataclass(frozen=True)
class Stretch:
    """What the samples say now: since when the GPUs sit idle (None: busy at the latest
    sample, or nothing judged), the latest sample, and why nothing is judged ("" if it is)."""

    idle_since: datetime | None
    last: Point | None
    problem: str = ""

    def idle_for(self) -> timedelta:
        if self.idle_since is None or self.last is None:
            return timedelta(0)
        return self.last.time - self.idle_since


def stretch_of(
    points: list[Point], *, percent: float, now: datetime, known_since: datetime | None
) -> Stretch:
    """Since when the GPUs sit idle: the last busy sample before the idle samples that run up
    to the latest (or the first sample after a gap), or, when the samples are idle as far back
    as they go, `known_since` (what an earlier check found) or their first."""
    if not points:
        return Stretch(None, None, "no utilisation sample yet (no data is not idle)")
    last = points[-1]
    if now - last.time > STALE:
        minutes = int((now - last.time).total_seconds() // 60)
        return Stretch(None, last, f"no utilisation sample for {minutes} min (no data is not idle)")
    if last.busiest >= percent:
        return Stretch(None, last)
    first = len(points) - 1
    while first > 0 and _idle_before(points, first, percent):
        first -= 1
    if first > 0 and points[first].at - points[first - 1].at <= GAP_S:
        return Stretch(points[first - 1].time, last)  # the last busy sample
    if first > 0:
        return Stretch(points[first].time, last)  # after a gap
    start = points[0].time
    return Stretch(known_since if known_since and known_since <= start else start, last)


def _idle_before(points: list[Point], n: int, percent: float) -> bool:
    """Whether the point before `n` is idle and no gap lies between them."""
    return points[n - 1].busiest < percent and points[n].at - points[n - 1].at <= GAP_S
