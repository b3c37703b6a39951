"""The periodic catch-up: runs never recorded (a crash between a run's change and its
recording), runs changed since, and open runs (billed up to now, so a month's minutes are in
its ledger before anyone closes it)."""

from __future__ import annotations

from celery import shared_task

from controlpanel.billing.services import runs_catch_up


@shared_task(acks_late=True, ignore_result=True)
def billing_catch_up() -> int:
    return runs_catch_up()
