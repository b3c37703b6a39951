"""Adding a flavor's price from a date (the admins' prices page).

A price is a new dated version (`FlavorPrice`); past versions stay. Minutes already billed
from that date on are priced again: every run of the flavor that has minutes at or after the
date is recorded afresh (`run_record(force=True)`), in the same transaction as the new row.
So the months it touches must be open: a closed month's invoice is issued (reopen it first)
and a locked month never changes. On any refusal nothing is written.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlpanel import audit
from controlpanel.billing.models import Period, PeriodState
from controlpanel.billing.rules import month_of
from controlpanel.billing.services import run_record
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import Flavor, FlavorPrice


def price_add(
    *,
    flavor: Flavor,
    valid_from: datetime,
    price_per_hour: Decimal,
    now: datetime | None = None,
) -> tuple[FlavorPrice, int]:
    """Add the version and re-price the runs it applies to; (the version, runs re-priced)."""
    now = now or timezone.now()
    if price_per_hour < 0:
        raise ValidationError({"price_per_hour": "A price cannot be negative."})
    with transaction.atomic():
        _hold_open_months(valid_from)
        clash = FlavorPrice.objects.filter(flavor=flavor, valid_from=valid_from).first()
        if clash is not None:
            raise ValidationError(
                {
                    "valid_from": f"{flavor.name} already has a price from "
                    f"{valid_from:%Y-%m-%d %H:%M} UTC ({clash.price_per_hour}/h)."
                }
            )
        version = FlavorPrice.objects.create(
            flavor=flavor, valid_from=valid_from, price_per_hour=price_per_hour
        )
        audit.record(
            "price.add",
            actor=None,
            target=version,
            flavor=flavor.name,
            valid_from=valid_from,
            price_per_hour=price_per_hour,
        )
        runs = (
            JobRun.objects.filter(flavor=flavor)
            .exclude(started_at=None)
            .filter(Q(finished_at=None) | Q(finished_at__gte=valid_from))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        repriced = sum(run_record(run_id=pk, now=now, force=True) for pk in runs)
    return version, repriced


def _hold_open_months(valid_from: datetime) -> None:
    """Lock the periods from `valid_from`'s month on (in the caller's transaction), refusing
    when one of them is locked or closed."""
    held = Period.objects.select_for_update().filter(month__gte=month_of(valid_from))
    for period in held.order_by("month"):
        if period.state == PeriodState.LOCKED:
            raise ValidationError(
                {
                    "valid_from": f"{period.month:%Y-%m} is locked: a price from "
                    f"{valid_from:%Y-%m-%d %H:%M} UTC would change it. Date it after "
                    "the last locked month."
                }
            )
        if period.state == PeriodState.CLOSED:
            raise ValidationError(
                {
                    "valid_from": f"{period.month:%Y-%m} is closed: a price from "
                    f"{valid_from:%Y-%m-%d %H:%M} UTC would change its invoice. Reopen "
                    "it first, or date the price later."
                }
            )
