"""Kept workspace claims expire: a run that ended in one of its kind's `claim_kept` states (a
failed push to retry, data to rescue) keeps its workspace claim, and the project's storage quota
with it, for WORKSPACE_KEPT_DAYS after it ended; then the retention task deletes the claim and
says so on the run's timeline. The job page says until when it is kept meanwhile.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlpanel.engine.admission import CLAIM_KEPT_STATES, job_need
from controlpanel.engine.backend import get_backend, job_ref
from controlpanel.engine.models import JobEvent, Workload
from controlpanel.engine.registry import kind_of

log = logging.getLogger(__name__)


def holds_claim(job: Workload) -> bool:
    """Whether the row's run still keeps a workspace claim."""
    return (
        job.state in kind_of(job).claim_kept
        and job.admitted_at is not None
        and job.launched_run >= job.run
        and job.workspace_deleted_at is None
        and job_need(job).storage_gib > 0
    )


def kept_until(job: Workload) -> datetime | None:
    """When a kept workspace claim is deleted; None when the run keeps none."""
    if not holds_claim(job):
        return None
    ended = job.finished_at or job.state_changed_at
    return ended + timedelta(days=settings.WORKSPACE_KEPT_DAYS)


def expire(now: datetime | None = None) -> int:
    """Delete the kept claims past WORKSPACE_KEPT_DAYS; returns how many went."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.WORKSPACE_KEPT_DAYS)
    due = Workload.objects.filter(
        state__in=CLAIM_KEPT_STATES, workspace_deleted_at=None, finished_at__lt=cutoff
    ).exclude(admitted_at=None)
    gone = 0
    for pk in due.values_list("pk", flat=True)[:200]:
        if _expire_one(pk, now):
            gone += 1
    return gone


def _expire_one(pk: Any, now: datetime) -> bool:
    job = Workload.objects.select_related("project", "flavor").filter(pk=pk).first()
    if job is None or not holds_claim(job):
        return False
    get_backend().release_workspace(ref=job_ref(job))  # 404: gone already
    with transaction.atomic():
        locked = Workload.objects.select_for_update(of=("self",)).filter(pk=pk).first()
        if locked is None or (locked.run, locked.state) != (job.run, job.state):
            return False  # run again or retried meanwhile: its claim is a new one
        locked.workspace_deleted_at = now
        locked.save(update_fields=["workspace_deleted_at"])
        days = settings.WORKSPACE_KEPT_DAYS
        JobEvent.objects.create(
            job=locked,
            run=locked.run,
            state=locked.state,
            reason=f"workspace deleted: failed runs keep it {days} days (WORKSPACE_KEPT_DAYS)",
            at=now,
        )
    log.info("workspace of %s run %s deleted after %s days", pk, job.run, days)
    return True
