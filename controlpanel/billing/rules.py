"""The billing rule, written once (PRODUCT.md, "Billing rule"); pure, no database.

Only RUNNING time is billed: a run that started at `start` and ended at `end` is billed
`billed_minutes(start, end)` minutes, each started minute in full, one at least. Its minute k
starts at `start + k minutes`; that instant decides everything about the minute: the UTC month
it is billed in and the price version it is priced at (the latest `valid_from` at or before
it). So a price change or a month boundary splits a run between two whole minutes.

The job pages' estimates (workloads.selectors) and the ledger (billing.services) both count
with these functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Generic, TypeVar

MINUTE = timedelta(minutes=1)
CENT = Decimal("0.01")
P = TypeVar("P")


def minutes_until(start: datetime, moment: datetime) -> int:
    """How many of the run's minutes start before `moment` (exact: no float)."""
    return max(0, -((start - moment) // MINUTE))


def billed_minutes(start: datetime, end: datetime) -> int:
    """Each started minute of RUNNING time in full, one at least."""
    return max(1, minutes_until(start, end))


def month_of(moment: datetime) -> date:
    """The calendar month (UTC) an instant lies in, as its first day."""
    utc = moment.astimezone(UTC)
    return date(utc.year, utc.month, 1)


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def month_start(month: date) -> datetime:
    return datetime(month.year, month.month, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Segment(Generic[P]):
    """Minutes `first` .. `first + minutes - 1` of a run: one month, one price version."""

    month: date
    price: P | None
    first: int
    minutes: int


def segments(
    start: datetime, minutes: int, prices: Iterable[tuple[datetime, P]]
) -> list[Segment[P]]:
    """The run's first `minutes` minutes cut by month and by price version, in order.

    `prices` are (valid_from, version) pairs in any order; minutes before the first version
    carry `None` (no price: they are kept, never dropped, so none is lost)."""
    ordered = sorted(prices, key=lambda pair: pair[0])
    price: P | None = None
    cuts: list[tuple[int, int, date | None, P | None]] = []
    for order, (valid_from, version) in enumerate(ordered):
        if valid_from <= start:
            price = version
        elif (first := minutes_until(start, valid_from)) < minutes:
            cuts.append((first, order, None, version))
    month = month_of(start)
    boundary = next_month(month)
    while (first := minutes_until(start, month_start(boundary))) < minutes:
        cuts.append((first, -1, boundary, None))
        boundary = next_month(boundary)
    cuts.sort(key=lambda cut: cut[:2])  # by minute; several versions in one minute: the last wins
    result: list[Segment[P]] = []
    begun = 0
    for first, _, new_month, new_price in cuts:
        if first > begun:
            result.append(Segment(month, price, begun, first - begun))
            begun = first
        if new_month is not None:
            month = new_month
        else:
            price = new_price
    result.append(Segment(month, price, begun, minutes - begun))
    return result


def amount(price_minutes: Decimal) -> Decimal:
    """Money for a sum of minutes × units × price per hour: divided by 60 once, at the end,
    and rounded to the cent (so a month's total is exact, not a sum of rounded minutes)."""
    return (price_minutes / 60).quantize(CENT, ROUND_HALF_UP)
