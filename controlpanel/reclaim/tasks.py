"""The idle policy's tasks: the periodic check (beat, every GPU_IDLE_CHECK_SECONDS), the
notices it makes (the owner's e-mail, then the project's webhook, on the `notifications`
queue like a job's end: settings.CELERY_TASK_ROUTES), and the hourly pricing of idle GPUs for
the dashboards (beat, every IDLE_MONEY_SECONDS)."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from celery import Task, shared_task
from django.core.cache import cache
from django.core.mail import send_mail
from django.utils import timezone

from controlpanel.engine.webhooks import post_project_webhook, webhook_retry_delay
from controlpanel.reclaim.models import GpuIdleNotice
from controlpanel.reclaim.money import idle_money_catch_up
from controlpanel.reclaim.services import EVENT, gpu_idle_check

log = logging.getLogger(__name__)
CHECK_LOCK = "ajuste:reclaim:check"
RESEND_AFTER = timedelta(minutes=15)
NOTICE = {
    "bind": True,
    "max_retries": 8,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "soft_time_limit": 60,
    "time_limit": 90,
}


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=240, time_limit=270)
def gpu_idle_check_task() -> dict[str, int]:
    """One check at a time (a slow Prometheus must not stack them), then its notices."""
    token = uuid.uuid4().hex
    if not cache.add(CHECK_LOCK, token, timeout=300):
        return {"skipped": 1}
    try:
        done = gpu_idle_check()
    finally:
        if cache.get(CHECK_LOCK) == token:
            cache.delete(CHECK_LOCK)
    for notice_id in done.notices:
        gpu_idle_notify.delay(notice_id)
    done.counts["resent"] = notices_resend()
    return done.counts


def notices_resend() -> int:
    """Notices made long ago and never handed over (a worker died, a message was lost)."""
    stale = GpuIdleNotice.objects.filter(
        notified_at=None, created_at__lt=timezone.now() - RESEND_AFTER
    )
    ids = list(stale.values_list("pk", flat=True)[:100])
    for notice_id in ids:
        gpu_idle_notify.delay(notice_id)
    return len(ids)


@shared_task(**NOTICE)
def gpu_idle_notify(self: Task, notice_id: int) -> None:
    """The webhook's task first (once), then the owner's e-mail; then it is handed over."""
    notice = GpuIdleNotice.objects.select_related("project", "owner").filter(pk=notice_id).first()
    if notice is None or notice.notified_at is not None:
        return
    if not self.request.retries:
        gpu_idle_webhook.delay(notice_id)
    try:
        _email(notice)
    except Exception as exc:
        if self.request.retries < self.max_retries:
            countdown = webhook_retry_delay(self.request.retries)
            raise self.retry(exc=exc, countdown=countdown) from exc
        log.warning("GPU idle notice %s: the e-mail was given up: %s", notice_id, exc)
    GpuIdleNotice.objects.filter(pk=notice_id, notified_at=None).update(notified_at=timezone.now())


def _email(notice: GpuIdleNotice) -> None:
    if notice.owner is None or not notice.owner.email or not notice.owner.is_active:
        return
    state = "stopped" if notice.payload.get("state") == "stopped" else "idle GPUs"
    send_mail(
        subject=f"[Ajuste] {notice.project.name}: {notice.payload.get('name', '')} ({state})",
        message=f"{notice.text}\n\n{notice.payload.get('url', '')}\n",
        from_email=None,
        recipient_list=[notice.owner.email],
        fail_silently=False,
    )


@shared_task(**NOTICE)
def gpu_idle_webhook(self: Task, notice_id: int) -> None:
    notice = GpuIdleNotice.objects.select_related("project").filter(pk=notice_id).first()
    if notice is None:
        return
    try:
        post_project_webhook(notice.project, EVENT, notice.payload)
    except Exception as exc:
        raise self.retry(exc=exc, countdown=webhook_retry_delay(self.request.retries)) from exc


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=240, time_limit=270)
def idle_money_task() -> int:
    """Price the hours of idle GPUs not priced yet (money.py)."""
    return idle_money_catch_up()
