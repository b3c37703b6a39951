"""The idle policy's rule without I/O (controlpanel/reclaim/policy.py): a minute is idle when
its busiest GPU is below the threshold; the idle stretch starts at the last busy sample; no
sample, a stale one or a gap is never taken for idle. The same rules are exercised end to end
through the Prometheus stand-in and the emulator in test_gpu_idle_policy.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controlpanel.dashboards.dcgm import GpuSeries
from controlpanel.reclaim.policy import Policy, points_of, stretch_of

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def gpu(name: str, values: list[float | None], start: datetime = T0) -> GpuSeries:
    """One GPU's samples a minute apart from `start` (None: no sample that minute)."""
    at = int(start.timestamp())
    points = {at + 60 * n: v for n, v in enumerate(values) if v is not None}
    return GpuSeries(workload="w", namespace="ns", pod="nb-w-0", gpu=name, points=points)


def test_a_minute_is_idle_only_when_its_busiest_gpu_is_below_the_threshold() -> None:
    points = points_of([gpu("0", [0, 0, 0]), gpu("1", [30, 29, 5])], percent=30)
    assert [(p.busiest, p.gpus, p.idle) for p in points] == [(30, 2, 1), (29, 2, 2), (5, 2, 2)]
    now = T0 + 2 * MINUTE
    stretch = stretch_of(points, percent=30, now=now, known_since=None)
    assert stretch.idle_since == T0  # the last minute one GPU still worked
    assert stretch.idle_for() == 2 * MINUTE
    busy = points_of([gpu("0", [0, 0, 0]), gpu("1", [5, 5, 30])], percent=30)
    assert stretch_of(busy, percent=30, now=now, known_since=None).idle_since is None


def test_the_stretch_starts_at_the_last_busy_sample() -> None:
    points = points_of([gpu("0", [85, 85, 85, 85] + [0] * 12)], percent=10)
    now = T0 + 15 * MINUTE
    stretch = stretch_of(points, percent=10, now=now, known_since=None)
    assert stretch.idle_since == T0 + 3 * MINUTE and stretch.problem == ""
    assert stretch.idle_for() == 12 * MINUTE
    # Idle as far back as the samples go: what an earlier check found, if not later.
    idle = points_of([gpu("0", [0] * 5)], percent=10)
    earlier = T0 - 30 * MINUTE
    found = stretch_of(idle, percent=10, now=T0 + 4 * MINUTE, known_since=earlier)
    assert found.idle_since == earlier


def test_no_sample_a_stale_one_or_a_gap_is_never_idle() -> None:
    none = stretch_of([], percent=10, now=T0, known_since=None)
    assert (none.idle_since, none.problem) == (
        None,
        "no utilisation sample yet (no data is not idle)",
    )
    old = points_of([gpu("0", [0] * 10)], percent=10)
    stale = stretch_of(old, percent=10, now=T0 + 30 * MINUTE, known_since=None)
    assert stale.idle_since is None
    assert stale.problem == "no utilisation sample for 21 min (no data is not idle)"
    assert stale.idle_for() == timedelta(0)
    # Ten idle minutes, a 20-minute hole, then 3 idle minutes: idle counts from after the hole.
    holed = points_of([gpu("0", [0] * 10 + [None] * 20 + [0] * 3)], percent=10)
    after = stretch_of(holed, percent=10, now=T0 + 32 * MINUTE, known_since=T0 - 60 * MINUTE)
    assert after.idle_since == T0 + 30 * MINUTE and after.idle_for() == 2 * MINUTE


def test_a_policy_of_0_minutes_is_off_and_its_lookback_covers_minutes_and_grace() -> None:
    class Settings:
        gpu_idle_percent, gpu_idle_minutes, gpu_idle_grace_minutes = 10, 0, 5
        gpu_idle_jobs = "warn"

    off = Policy.of(Settings())
    assert not off.on
    on = Policy(percent=10, minutes=30, grace=15, jobs="stop")
    assert on.on and on.lookback == timedelta(minutes=55)
