from __future__ import annotations

from celery import shared_task

from controlpanel.queues.services import queues_reconcile


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
