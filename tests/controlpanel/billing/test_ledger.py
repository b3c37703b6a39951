"""The ledger against a per-minute reference: random runs around a month boundary, prices
changing mid-run, observations duplicated, reordered, lost, recordings crashing half-way or
done twice, a month locked while runs are still open — in the end every run's minutes are
in the ledger exactly once, priced at the version in effect for each minute, in the month
each minute lies in; a locked month never changed, and its corrections are adjustment lines
of a later month; rebuilding a month from the runs gives the same lines and totals."""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.signals import post_save
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlpanel.billing import receivers, services
from controlpanel.billing.models import Line, Meter, Period, PeriodState
from controlpanel.billing.selectors import month_total
from controlpanel.billing.services import (
    PeriodError,
    month_rebuild,
    period_close,
    period_lock,
    run_record,
    runs_catch_up,
)
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.projects.models import Project

JAN, FEB, MAR = date(2025, 1, 1), date(2025, 2, 1), date(2025, 3, 1)
BOUNDARY = datetime(2025, 2, 1, tzinfo=UTC)
BASE = BOUNDARY - timedelta(hours=3)


def reference(
    start: datetime, end: datetime, prices: list[tuple[datetime, int]]
) -> Counter[tuple[date, int | None]]:
    """Minute by minute: each started minute (one at least), in the UTC month its start lies
    in, at the latest price version whose date is at or before its start."""
    micro = (end - start) // timedelta(microseconds=1)
    count = max(1, -(-micro // 60_000_000))
    minutes: Counter[tuple[date, int | None]] = Counter()
    for k in range(count):
        moment = start + timedelta(minutes=k)
        in_effect = [(valid_from, pk) for valid_from, pk in prices if valid_from <= moment]
        version = max(in_effect)[1] if in_effect else None
        minutes[(date(moment.year, moment.month, 1), version)] += 1
    return minutes


def ledger(run: JobRun) -> Counter[tuple[date, int | None]]:
    """What every line of the run bills, by (month of the minutes, version), whatever month
    it is billed in."""
    minutes: Counter[tuple[date, int | None]] = Counter()
    for line in Line.objects.filter(run=run):
        minutes[(line.of_period, line.price_id)] += line.minutes
    return +minutes  # drop zeros


@dataclass(frozen=True)
class Run:
    start: datetime
    end: datetime | None  # None: still running at the end of the story
    units: int
    seen: tuple[tuple[timedelta, timedelta], ...]  # running observations: (after start, delay)
    end_delay: timedelta  # how late its end is learned
    actions: tuple[str, ...]  # what happens to the recording of each observation


ACTIONS = st.sampled_from(["record", "record", "twice", "crash", "lost"])
SECONDS = st.integers(min_value=0, max_value=3 * 3600)


@st.composite
def runs(draw: Any) -> Run:
    start = BASE + timedelta(
        seconds=draw(st.integers(0, 5 * 3600)), microseconds=draw(st.integers(0, 999_999))
    )
    length = timedelta(seconds=draw(SECONDS), microseconds=draw(st.integers(0, 999_999)))
    ended = draw(st.booleans()) or draw(st.booleans())
    seen = draw(
        st.lists(
            st.tuples(
                st.integers(0, 3 * 3600).map(lambda s: timedelta(seconds=s)),
                st.integers(0, 3600).map(lambda s: timedelta(seconds=s)),
            ),
            max_size=3,
        )
    )
    seen = [(min(at, length), delay) for at, delay in seen]
    seen = seen + seen[: draw(st.integers(0, len(seen)))]  # duplicates
    return Run(
        start=start,
        end=start + length if ended else None,
        units=draw(st.integers(1, 4)),
        seen=tuple(seen),
        end_delay=timedelta(seconds=draw(st.integers(0, 2 * 3600))),
        actions=tuple(draw(st.lists(ACTIONS, min_size=len(seen) + 1, max_size=len(seen) + 1))),
    )


PRICES = st.lists(
    st.tuples(
        st.integers(-3600, 6 * 3600),  # seconds from BASE: before the runs, mid-run, after
        st.integers(0, 999_999).map(lambda n: Decimal(n) / 10_000),
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda pair: pair[0],
)


class Crash(Exception):
    pass


def record(run_id: int, now: datetime, action: str) -> None:
    """One observation's recording: done, done twice, crashed before it committed, or lost
    (the worker died after the run's row was written)."""
    if action == "crash":
        # the last write of a recording fails: its transaction rolls back, lines and all
        crash = mock.patch.object(services, "_save_meter", side_effect=Crash)
        with crash, contextlib.suppress(Crash):  # (nothing to write: no crash either)
            run_record(run_id=run_id, now=now)
    elif action != "lost":
        run_record(run_id=run_id, now=now)
        if action == "twice":
            assert not run_record(run_id=run_id, now=now)  # nothing left to change


def story(run: Run) -> list[tuple[datetime, str, Any]]:
    """The run's observations as delivered: (when, what, action), unsorted."""
    events: list[tuple[datetime, str, Any]] = []
    limit = (run.end - run.start) if run.end else timedelta(hours=3)
    for (at, delay), action in zip(run.seen, run.actions, strict=False):
        events.append((run.start + min(at, limit) + delay, "running", action))
    if run.end is not None:
        events.append((run.end + run.end_delay, "end", run.actions[-1]))
    elif not run.seen:
        events.append((run.start, "running", run.actions[-1]))
    return events


def play(
    project: Project, flavor: Flavor, scenario: list[Run], lock_at: datetime | None
) -> tuple[datetime, dict[int, list[tuple[Any, ...]]]]:
    """Deliver every run's observations in time order (so runs' reports interleave and come
    late), locking January at `lock_at`; then the catch-up task. The locked lines as locked."""
    events = [
        (when, n, what, action)
        for n, run in enumerate(scenario)
        for when, what, action in story(run)
    ]
    if lock_at is not None:
        events.append((lock_at, -1, "lock", ""))
    events.sort(key=lambda event: (event[0], event[1]))
    snapshot: dict[int, list[tuple[Any, ...]]] = {}
    for when, n, what, action in events:
        if what == "lock":
            period_close(month=JAN, now=when)
            period_lock(month=JAN, now=when)
            snapshot = locked_lines()
            continue
        run = scenario[n]
        row = JobRun.objects.filter(uid=f"run-{n}").first()
        if row is None or row.finished_at is None:  # an end is final: later reports are stale
            row, _ = JobRun.objects.update_or_create(
                uid=f"run-{n}",
                defaults={
                    "project": project,
                    "run": 1,
                    "flavor": flavor,
                    "units": run.units,
                    "started_at": run.start,
                    "finished_at": run.end if what == "end" else None,
                },
            )
        record(row.pk, when, action)
    final = max(event[0] for event in events) + timedelta(minutes=1)
    runs_catch_up(now=final)
    return final, snapshot


def locked_lines() -> dict[int, list[tuple[Any, ...]]]:
    return {
        line.pk: [line.period, line.of_period, line.price_id, line.minutes, line.price_per_hour]
        for line in Line.objects.filter(period__in=locked_months())
    }


def locked_months() -> list[date]:
    return list(Period.objects.filter(state=PeriodState.LOCKED).values_list("month", flat=True))


def lines_as_values() -> list[tuple[Any, ...]]:
    return sorted(
        Line.objects.values_list(
            "run_id", "period", "of_period", "price_id", "first_minute", "minutes", "units"
        ),
        key=repr,
    )


@pytest.fixture
def flavor(db: Any) -> Flavor:
    return Flavor.objects.create(name="test-gpu", vcpu_per_unit=8, memory_gib_per_unit=64)


@pytest.fixture
def unhooked() -> Any:
    """The engine's hooks record at the real "now": stories set in January 2025 record at
    their own times instead, by calling run_record themselves."""
    post_save.disconnect(dispatch_uid="billing-run-saved", sender=JobRun)
    yield
    post_save.connect(receivers._run_saved, sender=JobRun, dispatch_uid="billing-run-saved")


# 400 examples: with `locked = frozenset()` in services._record (locked months rewritten like
# open ones) the CI profile's derandomized run first fails at example 311; at 60 it passed.
# They take about 5 minutes on a loaded 2-core machine (0.8 s each), past the suite's 300 s.
@pytest.mark.slow
@pytest.mark.timeout(1200)
@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    prices=PRICES,
    scenario=st.lists(runs(), min_size=1, max_size=4),
    lock=st.one_of(st.none(), st.integers(0, 5 * 3600)),
)
def test_the_ledger_bills_every_minute_once(
    unhooked: Any,
    project: Project,
    flavor: Flavor,
    prices: Any,
    scenario: list[Run],
    lock: int | None,
) -> None:
    with transaction.atomic():
        versions = [
            FlavorPrice.objects.create(
                flavor=flavor, valid_from=BASE + timedelta(seconds=at), price_per_hour=price
            )
            for at, price in prices
        ]
        dated = [(v.valid_from, v.pk) for v in versions]
        lock_at = None if lock is None else BOUNDARY + timedelta(seconds=lock)
        final, snapshot = play(project, flavor, scenario, lock_at)

        expected_money = Decimal(0)
        for n, run in enumerate(scenario):
            row = JobRun.objects.get(uid=f"run-{n}")
            wanted = reference(run.start, run.end or final, dated)
            assert ledger(row) == wanted, (n, run)
            rates = {v.pk: v.price_per_hour for v in versions}
            expected_money += sum(
                (
                    count * run.units * rates.get(pk, Decimal(0))
                    for (_, pk), count in wanted.items()
                ),
                Decimal(0),
            )
        billed = sum((month_total(month=m).price_minutes for m in (JAN, FEB, MAR)), Decimal(0))
        assert billed == expected_money  # exact: minutes × units × price, nothing rounded

        assert locked_lines() == snapshot  # a locked month never changed
        for line in Line.objects.exclude(period=F("of_period")):
            assert line.period > line.of_period and line.first_minute is None
            assert line.of_period in locked_months()  # only a locked month's minutes adjust

        rebuilt = [m for m in (JAN, FEB, MAR) if m not in locked_months()]
        before = {m: month_total(month=m) for m in (JAN, FEB, MAR)}
        lines_before = lines_as_values()
        for month in rebuilt:
            month_rebuild(month=month, now=final)
        assert {m: month_total(month=m) for m in (JAN, FEB, MAR)} == before
        assert lines_as_values() == lines_before
        for month in set(locked_months()):
            with pytest.raises(PeriodError):
                month_rebuild(month=month, now=final)
        with connection.cursor() as cursor:  # the deferred "minute billed once" check, now
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        transaction.set_rollback(True)


# Single cases, worked by hand


def make_run(project: Project, flavor: Flavor, start: datetime, end: datetime | None) -> JobRun:
    return JobRun.objects.create(
        uid=f"uid-{start.isoformat()}",
        project=project,
        run=1,
        flavor=flavor,
        units=2,
        started_at=start,
        finished_at=end,
    )


def test_money_is_exact_and_rounded_once(project: Project, flavor: Flavor) -> None:
    FlavorPrice.objects.create(flavor=flavor, valid_from=BASE, price_per_hour=Decimal("2.8000"))
    for n in range(3):  # 3 runs of 61 s: 2 started minutes each, 2 units, 2.80/h
        start = BASE + timedelta(hours=n)
        make_run(project, flavor, start, start + timedelta(seconds=61))
    total = month_total(month=JAN, project=project)
    assert (total.minutes, total.unit_minutes) == (6, 12)
    assert total.price_minutes == Decimal("33.6")  # 12 unit-minutes × 2.80
    assert total.amount == Decimal("0.56")  # 33.6 / 60, not 3 × round(0.1866…) = 0.57


def test_a_run_is_split_by_a_price_change_and_a_month(project: Project, flavor: Flavor) -> None:
    old = FlavorPrice.objects.create(flavor=flavor, valid_from=BASE, price_per_hour=Decimal(6))
    new = FlavorPrice.objects.create(
        flavor=flavor, valid_from=BOUNDARY - timedelta(minutes=30), price_per_hour=Decimal(12)
    )
    run = make_run(
        project,
        flavor,
        BOUNDARY - timedelta(minutes=45, seconds=30),
        BOUNDARY + timedelta(minutes=10),
    )
    lines = [
        (ln.of_period, ln.price_id, ln.first_minute, ln.minutes) for ln in run.billing_lines.all()
    ]
    # minute k starts at 23:14:30 + k: 0..15 before the change (23:29:30 < 23:30),
    # 16..45 after it in January (45 starts 23:59:30), 46..55 in February
    assert lines == [(JAN, old.pk, 0, 16), (JAN, new.pk, 16, 30), (FEB, new.pk, 46, 10)]


def test_the_engine_records_on_every_change_of_a_run(project: Project, flavor: Flavor) -> None:
    """The hooks: a JobRun saved (lifecycle._record_times) and a run closed by record_state
    (an update, which sends no post_save) both bring the ledger up to date."""
    from django.utils import timezone

    from controlpanel.engine.lifecycle import record_state
    from controlpanel.jobs.models import Job
    from controlpanel.jobs.states import JobState
    from tests.fixtures.panel import UserFactory

    FlavorPrice.objects.create(flavor=flavor, valid_from=BASE, price_per_hour=Decimal(6))
    job = Job.objects.create(
        project=project,
        owner=UserFactory(),
        name="j",
        image="busybox",
        flavor=flavor,
        gpu=2,
        state=JobState.RUNNING,
    )
    start = timezone.now() - timedelta(minutes=4, seconds=30)
    run = JobRun.objects.create(
        uid="pod-1", job=job, project=project, run=1, flavor=flavor, units=2, started_at=start
    )
    assert Meter.objects.get(run=run).finished_at is None
    assert sum(ln.minutes for ln in run.billing_lines.all()) == 5  # open: up to now
    record_state(job, JobState.ERROR, "the workload disappeared", at=start + timedelta(minutes=2))
    run.refresh_from_db()
    assert run.finished_at == start + timedelta(minutes=2)
    assert sum(ln.minutes for ln in run.billing_lines.all()) == 2  # closed at its end


def test_periods_close_then_lock_and_corrections_become_adjustments(
    unhooked: Any, project: Project, flavor: Flavor
) -> None:
    price = FlavorPrice.objects.create(flavor=flavor, valid_from=BASE, price_per_hour=Decimal(6))
    early = BOUNDARY - timedelta(minutes=1)
    with pytest.raises(PeriodError, match="not over"):
        period_close(month=JAN, now=early)
    with pytest.raises(PeriodError, match="close it"):
        period_lock(month=JAN, now=BOUNDARY)
    # A run starts 30 min before the month ends and is still running when January is
    # closed and locked an hour into February: January bills its 30 minutes.
    run = make_run(project, flavor, BOUNDARY - timedelta(minutes=30), None)
    run_record(run_id=run.pk, now=BOUNDARY - timedelta(minutes=20))
    period_close(month=JAN, now=BOUNDARY + timedelta(hours=1))
    with pytest.raises(PeriodError, match="closed already"):
        period_close(month=JAN, now=BOUNDARY + timedelta(hours=1))
    period_lock(month=JAN, now=BOUNDARY + timedelta(hours=1))
    assert month_total(month=JAN).minutes == 30
    assert month_total(month=FEB).minutes == 60
    # Then we learn it ended 10 minutes before the month did.
    run.finished_at = BOUNDARY - timedelta(minutes=10)
    run.save()
    assert run_record(run_id=run.pk, now=BOUNDARY + timedelta(hours=2))
    assert month_total(month=JAN).minutes == 30  # locked: unchanged
    assert [(ln.period, ln.of_period, ln.minutes, ln.price_id) for ln in Line.objects.all()] == [
        (JAN, JAN, 30, price.pk),
        (FEB, JAN, -10, price.pk),  # the visible adjustment, in the next open month
    ]
    assert month_total(month=FEB).amount == Decimal("-2.00")  # 10 min × 2 units × 6/h
    with pytest.raises(PeriodError, match="locked"):
        month_rebuild(month=JAN)
    assert not run_record(run_id=run.pk, now=BOUNDARY + timedelta(hours=2), force=True)


def test_a_minute_cannot_be_in_two_usage_lines(project: Project, flavor: Flavor) -> None:
    run = make_run(project, flavor, BASE, BASE + timedelta(minutes=10))  # no price yet: kept
    line = Line.objects.get(run=run)
    assert (line.first_minute, line.minutes, line.price_id) == (0, 10, None)
    price = FlavorPrice.objects.create(flavor=flavor, valid_from=BASE, price_per_hour=Decimal(1))
    refused = pytest.raises(IntegrityError, match="billing_line_minute_billed_once")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        Line.objects.create(
            run=run,
            project=project,
            flavor=flavor,
            price=price,
            price_per_hour=1,
            units=2,
            currency="EUR",
            period=JAN,
            of_period=JAN,
            run_start=BASE,
            first_minute=9,
            minutes=1,
        )
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
