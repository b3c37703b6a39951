"""The sweeps' Celery tasks: thin, keyed by ids, idempotent. `sweep_advance` claims its sweep
with a conditional update (a duplicate or retried task finds it claimed, or finds the trials
its predecessor made, and makes none twice); `sweeps_tick` (beat) advances every running
sweep; a trial's end advances its sweep at once (receivers.py)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from controlpanel.sweeps import adapters, selectors, services, tracking
from controlpanel.sweeps.models import Adapter, Sweep, SweepState

log = logging.getLogger(__name__)
CLAIM = timedelta(minutes=2)  # a worker that died mid-advance holds its sweep this long
RETRY: dict[str, Any] = {
    "autoretry_for": (ConnectionError, TimeoutError),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "max_retries": 10,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
}


@shared_task(name="controlpanel.sweeps.tasks.sweep_advance", **RETRY)
def sweep_advance(sweep_id: str) -> None:
    now = timezone.now()
    free = Q(claimed_until=None) | Q(claimed_until__lt=now)
    claimed = Sweep.objects.filter(free, pk=sweep_id, state=SweepState.RUNNING).update(
        claimed_until=now + CLAIM
    )
    if not claimed:
        return  # gone, ended, or another worker is advancing it
    try:
        sweep = Sweep.objects.select_related("project", "owner").get(pk=sweep_id)
        services.sweep_advance(sweep=sweep)
    finally:
        Sweep.objects.filter(pk=sweep_id).update(claimed_until=None)


@shared_task(name="controlpanel.sweeps.tasks.sweeps_tick", ignore_result=True)
def sweeps_tick() -> None:
    for sweep_id in Sweep.objects.filter(state=SweepState.RUNNING).values_list("pk", flat=True):
        sweep_advance.delay(str(sweep_id))


@shared_task(name="controlpanel.sweeps.tasks.adapter_record", **RETRY)
def adapter_record(job_id: str, run: int) -> None:
    adapter = adapters.adapter_record(job_id=job_id, run=run)
    if adapter is not None and settings.MLFLOW_TRACKING_URI:
        adapter_export.delay(adapter.pk)


@shared_task(name="controlpanel.sweeps.tasks.adapter_export", **RETRY)
def adapter_export(adapter_id: int) -> None:
    """Once per adapter: claimed before the export, released if it fails (then retried)."""
    if not Adapter.objects.filter(pk=adapter_id, exported_at=None).update(
        exported_at=timezone.now()
    ):
        return
    adapter = Adapter.objects.select_related("project", "job").get(pk=adapter_id)
    points = selectors.loss_points(adapter.job) if adapter.job else {}
    try:
        tracking.adapter_export(adapter=adapter, points=points)
    except Exception as error:
        Adapter.objects.filter(pk=adapter_id).update(exported_at=None)
        log.warning("MLflow export of adapter %s failed: %s", adapter_id, error)
        raise ConnectionError(str(error)) from error
