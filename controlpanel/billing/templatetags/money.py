"""Money as every page shows it, written once: to the cent, and to the hundredth of a cent where
an amount holds less than that (a CPU minute costs fractions of a cent: 0.04/h is 0.0007 a
minute, which a cent-rounded 0.00 hid). The figures stay exact decimals until shown; invoice
lines and totals, rounded to the cent by the billing rule, read as they are."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django import template

register = template.Library()

CENT = Decimal("0.01")
SHOWN = Decimal("0.0001")  # what the job pages show of a run's cost (usage.Cost)


def money_text(value: Any) -> str:
    """`12.50`, `0.0007`, `1.2346`; "—" for no amount."""
    if value is None or value == "":
        return "—"
    try:
        exact = Decimal(value).quantize(SHOWN, ROUND_HALF_UP)
    except (InvalidOperation, TypeError, ValueError):
        return str(value)
    cents = exact.quantize(CENT)
    return f"{cents}" if cents == exact else f"{exact.normalize():f}"


def exact_amount(sums: Any) -> Decimal:
    """The money of sums that carry Σ minutes × units × price per hour (`price_minutes`),
    not rounded: the ledger's Total, a usage Row, the admin pages' Usage, a run's Cost."""
    return Decimal(sums.price_minutes) / 60


@register.filter(name="money")
def money(value: Any) -> str:
    return money_text(value)


@register.filter
def amount_of(sums: Any) -> str:
    """`{{ usage|amount_of }}`: the exact amount of some sums, shown as money."""
    return money_text(exact_amount(sums)) if sums is not None else "—"
