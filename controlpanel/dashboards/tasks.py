"""The periodic rollup of today and yesterday (beat, DASHBOARD_ROLLUP_SECONDS), and the reading
of the compute backend's capacity that the admins' capacity view shows."""

from __future__ import annotations

from celery import shared_task
from django.core.cache import cache

from controlpanel.dashboards.capacity import capacity_refresh
from controlpanel.dashboards.rollups import days_rebuild, recent_days

LOCK = "dashboards-rollup"


@shared_task(acks_late=True, ignore_result=True)
def dashboards_rollup() -> int:
    """One rebuild at a time: a slow one is not doubled by the next beat. The capacity is read
    after the rollup, so a slow cluster never holds the numbers back."""
    if not cache.add(LOCK, 1, timeout=300):
        return 0
    try:
        return days_rebuild(recent_days())
    finally:
        try:
            capacity_refresh()
        finally:
            cache.delete(LOCK)
