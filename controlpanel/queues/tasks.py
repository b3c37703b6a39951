from __future__ import annotations

from celery import shared_task

from controlpanel.queues.services import queues_observe, queues_reconcile


@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(Exception,),
    retry_backoff=True,
    max_retries=5,
)
def queues_reconcile_task() -> list[str]:
    """Make Kueue's objects match the panel's projects and flavors (idempotent)."""
    return queues_reconcile()


@shared_task(acks_late=True, ignore_result=True)
def queues_observe_task() -> dict[str, int]:
    """Keep what Kueue says of its queues for the pages (beat, QUEUES_OBSERVE_SECONDS): a
    lost or failed run is repaired by the next one, so no retry."""
    return queues_observe()
