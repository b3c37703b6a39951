"""Writes of the ledger: recording a run, rebuilding a month, closing and locking periods.

`run_record` is the one function that writes lines (and, with them, each workload's month:
billing/rollup.py). It derives the whole of a run's ledger
from its row (re-read under the row's lock) and the flavor's price versions, then makes the
lines say exactly that: recording twice, or after a crash half-way (its transaction rolled
back), or from a row that later observations rewrite, leaves the lines equal to what the row
says, so a minute is never lost nor billed twice. The only lines it never touches are those
of locked months: the difference between what a locked month billed and what its minutes
turn out to be lands, as an adjustment line, in the first later month that is not locked.

An open run (no end yet) is billed up to "now", never back: its meter keeps how far, and a
later recording (its next observation, its end, the catch-up task, a month's close) extends
it. So a month closed while a notebook runs holds that notebook's minutes up to the close,
and when the run's end is learned later than that, the difference lands where it belongs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from controlpanel import audit
from controlpanel.billing.models import Line, Meter, Period, PeriodState
from controlpanel.billing.rollup import contribution, rollup_follow, rollup_rebuild
from controlpanel.billing.rules import (
    MINUTE,
    billed_minutes,
    month_of,
    month_start,
    next_month,
    segments,
)
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import FlavorPrice

# (month the minutes lie in, price version id or None)
Key = tuple[date, int | None]


class PeriodError(Exception):
    """A period cannot make the asked move (shown to the admin as it is)."""


@dataclass(frozen=True)
class Wanted:
    """What the run's row says one (month, price version) is: minutes first .. first+n-1."""

    first: int
    minutes: int
    price: FlavorPrice | None


def run_record(*, run_id: int, now: datetime | None = None, force: bool = False) -> bool:
    """Bring one run's ledger up to date from its row; True when a line changed.

    `force`: recompute even when the meter says the row has not changed since (rebuild)."""
    now = now or timezone.now()
    if not force:  # the common case first, without a lock: a closed run already recorded
        seen = JobRun.objects.select_related("meter").filter(pk=run_id).first()
        if seen is None or seen.started_at is None or _unchanged(_meter(seen), seen):
            return False
    return _record_again(run_id, now, force, None)


def _record_again(run_id: int, now: datetime, force: bool, rebuilding: date | None) -> bool:
    """`rebuilding`: a month whose rollup its rebuild sums afresh once every run is in."""
    for _ in range(5):
        try:
            with transaction.atomic():
                return _record(run_id, now, force, rebuilding)
        except _PeriodLockedMeanwhile:
            continue  # a month was locked while we computed: again, with it locked
    raise RuntimeError(f"run {run_id}: periods kept being locked while recording")


class _PeriodLockedMeanwhile(Exception):
    pass


def _record(run_id: int, now: datetime, force: bool, rebuilding: date | None) -> bool:
    run = (
        JobRun.objects.select_for_update(of=("self",))
        .select_related("meter")
        .filter(pk=run_id)
        .first()
    )
    if run is None or run.started_at is None:
        return False
    meter = _meter(run)
    if not force and _unchanged(meter, run):
        return False  # recorded meanwhile
    end = run.finished_at
    if end is None:  # open: up to now, never back (a late or reordered recording shrinks nothing)
        end = max(now, meter.billed_to) if meter and meter.started_at == run.started_at else now
    prices = list(FlavorPrice.objects.filter(flavor_id=run.flavor_id))
    wanted = _wanted(run.started_at, end, prices)
    lines = list(Line.objects.filter(run=run))
    states = _hold_periods_from(min([m for m, _ in wanted] + [ln.of_period for ln in lines]))
    locked = frozenset(m for m, state in states.items() if state == PeriodState.LOCKED)
    writes = _usage_writes(wanted, locked) + _adjustment_writes(
        wanted, lines, locked, {p.pk: p for p in prices}
    )
    _hold_new_periods({w[0] for w in writes} - states.keys())
    before = contribution(lines, run.job_id)  # before _apply changes them in place
    changed, after = _apply(run, writes, lines, locked)
    if changed:
        if rebuilding is not None:  # its rebuild sums that month afresh
            after = [line for line in after if line.period != rebuilding]
            before = {key: sums for key, sums in before.items() if key[0] != rebuilding}
        rollup_follow(run=run, before=before, after=after)
    _save_meter(
        run,
        meter,
        {
            "flavor_id": run.flavor_id,
            "units": run.units,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "billed_to": end,
            "minutes": sum(w.minutes for w in wanted.values()),
            "recorded_at": now,
        },
    )
    return changed


def _wanted(start: datetime, end: datetime, prices: list[FlavorPrice]) -> dict[Key, Wanted]:
    """A run's minutes from `start` up to `end` by (month, price version): what its usage
    lines must say."""
    return {
        (seg.month, seg.price.pk if seg.price else None): Wanted(seg.first, seg.minutes, seg.price)
        for seg in segments(start, billed_minutes(start, end), [(p.valid_from, p) for p in prices])
    }


def _meter(run: JobRun) -> Meter | None:
    try:
        return run.meter  # type: ignore[no-any-return]
    except Meter.DoesNotExist:
        return None


def _save_meter(run: JobRun, meter: Meter | None, values: dict[str, Any]) -> None:
    """The last write of a recording (a crash before it rolls the recording back whole)."""
    if meter is None:
        Meter.objects.create(run=run, **values)
    else:
        Meter.objects.filter(run=run).update(**values)


def _unchanged(meter: Meter | None, run: JobRun) -> bool:
    return (
        meter is not None
        and run.finished_at is not None
        and meter.finished_at == run.finished_at
        and meter.started_at == run.started_at
        and meter.flavor_id == run.flavor_id
        and meter.units == run.units
    )


# What a line should be: (period, of_period, price id) → (first_minute, minutes, price object).
Write = tuple[date, date, int | None, int | None, int, FlavorPrice | None]


def _usage_writes(wanted: dict[Key, Wanted], locked: frozenset[date]) -> list[Write]:
    """The minutes of months that are not locked: one usage line per (month, version)."""
    return [
        (month, month, price_id, w.first, w.minutes, w.price)
        for (month, price_id), w in wanted.items()
        if month not in locked
    ]


def _adjustment_writes(
    wanted: dict[Key, Wanted],
    lines: list[Line],
    locked: frozenset[date],
    prices: dict[int, FlavorPrice],
) -> list[Write]:
    """For each locked month's (month, version): what it should bill less what locked months
    billed already, put in the first later month that is not locked (nothing when equal)."""
    final: dict[Key, int] = defaultdict(int)
    for line in lines:
        if line.of_period in locked and line.period in locked:
            final[(line.of_period, line.price_id)] += line.minutes
    keys = {key for key in wanted if key[0] in locked}
    keys |= {(line.of_period, line.price_id) for line in lines if line.of_period in locked}
    writes: list[Write] = []
    for month, price_id in sorted(keys, key=lambda key: (key[0], key[1] or 0)):
        wish = wanted.get((month, price_id))
        delta = (wish.minutes if wish else 0) - final[(month, price_id)]
        if delta:
            target = _first_unlocked_after(month, locked)
            price = wish.price if wish else prices.get(price_id) if price_id else None
            writes.append((target, month, price_id, None, delta, price))
    return writes


def _first_unlocked_after(month: date, locked: frozenset[date]) -> date:
    target = next_month(month)
    while target in locked:
        target = next_month(target)
    return target


def _apply(
    run: JobRun, writes: list[Write], lines: list[Line], locked: frozenset[date]
) -> tuple[bool, list[Line]]:
    """Make the run's lines outside locked months exactly `writes` (only those that differ
    are written); whether any changed, and the run's lines now."""
    have = {(line.period, line.of_period, line.price_id): line for line in lines}
    keep = {(w[0], w[1], w[2]) for w in writes}
    stale = [line.pk for key, line in have.items() if key not in keep and line.period not in locked]
    if stale:
        Line.objects.filter(pk__in=stale).delete()
    changed = bool(stale)
    new: list[Line] = []
    for period, of_period, price_id, first, minutes, price in writes:
        line = have.get((period, of_period, price_id))
        values: dict[str, Any] = {
            "project_id": run.project_id,
            "flavor_id": run.flavor_id,
            "price_id": price.pk if price else None,
            "price_per_hour": price.price_per_hour if price else Decimal(0),
            "units": run.units,
            "currency": settings.CURRENCY,
            "run_start": run.started_at,
            "first_minute": first,
            "minutes": minutes,
        }
        if line is None:
            new.append(Line(run=run, period=period, of_period=of_period, **values))
        elif any(getattr(line, name) != value for name, value in values.items()):
            for name, value in values.items():
                setattr(line, name, value)
            line.save()
            changed = True
    if new:
        Line.objects.bulk_create(new)
    kept = [line for line in lines if line.pk not in stale]
    return changed or bool(new), kept + new


def _hold_periods_from(first: date) -> dict[date, str]:
    """The state of every month from `first` on that has a row, each share-locked: locking
    one of them waits until this recording commits, and sees what it wrote."""
    if connection.vendor != "postgresql":  # SQLite: one writer at a time already
        return dict(Period.objects.filter(month__gte=first).values_list("month", "state"))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT month, state FROM billing_period WHERE month >= %s ORDER BY month FOR SHARE",
            [first],
        )
        return dict(cursor.fetchall())


def _hold_new_periods(months: set[date]) -> None:
    """Months about to be written that had no row (the first recording in a new month): made
    and share-locked; if another transaction made and locked one meanwhile, start again."""
    if not months:
        return
    Period.objects.bulk_create([Period(month=m) for m in sorted(months)], ignore_conflicts=True)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT state FROM billing_period WHERE month = ANY(%s) ORDER BY month FOR SHARE",
                [sorted(months)],
            )
            states = [state for (state,) in cursor.fetchall()]
        if PeriodState.LOCKED in states:
            raise _PeriodLockedMeanwhile


def runs_in_month(month: date) -> Q:
    """Runs that may have a minute in `month` (a superset: recording the others is a no-op)."""
    begin, end = month_start(month), month_start(next_month(month))
    return Q(started_at__lt=end) & (
        Q(finished_at=None) | Q(finished_at__gte=begin - MINUTE) | Q(started_at__gte=begin - MINUTE)
    )


def month_runs(month: date) -> set[int]:
    """Runs with minutes in `month` or lines billed in it (adjustments of earlier months)."""
    ids = set(JobRun.objects.filter(runs_in_month(month)).values_list("pk", flat=True))
    return ids | set(Line.objects.filter(period=month).values_list("run_id", flat=True))


def month_record(*, month: date, now: datetime | None = None) -> int:
    """Record every run of `month` (open ones up to now); how many changed."""
    now = now or timezone.now()
    return sum(run_record(run_id=pk, now=now) for pk in sorted(month_runs(month)))


def month_rebuild(*, month: date, now: datetime | None = None) -> int:
    """Recompute a month that is not locked from the runs alone: its lines are deleted and
    every run with minutes (or adjustments) in it recorded afresh, in one transaction."""
    now = now or timezone.now()
    with transaction.atomic():
        if Period.objects.filter(month=month, state=PeriodState.LOCKED).exists():
            raise PeriodError(f"{month:%Y-%m} is locked: it never changes.")
        runs = month_runs(month)
        Line.objects.filter(period=month).delete()
        Meter.objects.filter(run_id__in=runs).delete()
        changed = sum(_record_again(pk, now, True, month) for pk in sorted(runs))
        rollup_rebuild(month=month)
        return changed


def period_close(*, month: date, by: Any = None, now: datetime | None = None) -> Period:
    """Close a month that is over, after bringing every run of it up to date (open runs up
    to now, so the whole month is in). Its draft is what the pages show before this."""
    now = now or timezone.now()
    if month_start(next_month(month)) > now:
        raise PeriodError(f"{month:%Y-%m} is not over yet.")
    month_record(month=month, now=now)
    with transaction.atomic():
        period = _period_for_update(month)
        if period.state != PeriodState.OPEN:
            raise PeriodError(f"{month:%Y-%m} is {period.state} already.")
        period.state, period.closed_at, period.closed_by = PeriodState.CLOSED, now, by
        period.save()
        audit.record("period.close", actor=by, target=period, month=f"{month:%Y-%m}")
    return period


def period_reopen(*, month: date) -> Period:
    """Take back a close (not a lock)."""
    with transaction.atomic():
        period = _period_for_update(month)
        if period.state != PeriodState.CLOSED:
            raise PeriodError(f"{month:%Y-%m} is {period.state}: only a closed month reopens.")
        period.state, period.closed_at, period.closed_by = PeriodState.OPEN, None, None
        period.save()
        audit.record("period.reopen", actor=None, target=period, month=f"{month:%Y-%m}")
    return period


def period_lock(*, month: date, by: Any = None, now: datetime | None = None) -> Period:
    """Lock a closed month for good, its runs brought up to date first. The lock waits for
    recordings writing into the month (they share-lock its row) and later ones see it."""
    now = now or timezone.now()
    month_record(month=month, now=now)
    with transaction.atomic():
        period = _period_for_update(month)
        if period.state != PeriodState.CLOSED:
            raise PeriodError(f"{month:%Y-%m} is {period.state}: close it (and review) first.")
        period.state, period.locked_at, period.locked_by = PeriodState.LOCKED, now, by
        period.save()
        audit.record("period.lock", actor=by, target=period, month=f"{month:%Y-%m}")
    return period


def _period_for_update(month: date) -> Period:
    if month != month_of(month_start(month)):
        raise PeriodError(f"{month} is not the first day of a month.")
    Period.objects.bulk_create([Period(month=month)], ignore_conflicts=True)
    return Period.objects.select_for_update().get(month=month)


def runs_behind() -> list[int]:
    """Runs whose ledger may be behind their row: never recorded, changed since, or open."""
    return list(
        JobRun.objects.exclude(started_at=None)
        .filter(
            Q(meter=None)
            | Q(finished_at=None)
            | Q(meter__finished_at=None)
            | ~Q(meter__finished_at=F("finished_at"))
            | ~Q(meter__started_at=F("started_at"))
            | ~Q(meter__units=F("units"))
            | ~Q(meter__flavor_id=F("flavor_id"))
        )
        .values_list("pk", flat=True)
    )


def runs_catch_up(*, now: datetime | None = None) -> int:
    """Record every run that is behind (the periodic task; a crash lost nothing)."""
    now = now or timezone.now()
    return sum(run_record(run_id=pk, now=now) for pk in runs_behind())
