"""The periodic rollup of today and yesterday (beat, DASHBOARD_ROLLUP_SECONDS)."""

from __future__ import annotations

from celery import shared_task
from django.core.cache import cache

from controlpanel.dashboards.rollups import days_rebuild, recent_days

LOCK = "dashboards-rollup"


@shared_task(acks_late=True, ignore_result=True)
def dashboards_rollup() -> int:
    """One rebuild at a time: a slow one is not doubled by the next beat."""
    if not cache.add(LOCK, 1, timeout=300):
        return 0
    try:
        return days_rebuild(recent_days())
    finally:
        cache.delete(LOCK)
