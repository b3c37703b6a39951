"""The periodic catch-up: runs never recorded (a crash between a run's change and its
recording), runs changed since, and open runs (billed up to now, so a month's minutes are in
its ledger before anyone closes it); then every budgeted project's budget is checked.

Budget checks: `budget_check_soon` (after a recording commits, at most one queued per
project) and the catch-up. An alert's notice (e-mail to the managers, then the project's
webhook) goes through the `notifications` queue (settings.CELERY_TASK_ROUTES), like a job's
end."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from celery import Task, shared_task
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.billing.budgets import Outcome, budget_check
from controlpanel.billing.models import BudgetAlert
from controlpanel.billing.notifications import post_alert_webhook, send_alert_email
from controlpanel.billing.services import runs_catch_up
from controlpanel.engine.models import LIVE_STATES, Workload
from controlpanel.engine.services import workload_stop
from controlpanel.engine.webhooks import webhook_retry_delay
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project

log = logging.getLogger(__name__)
CHECK_QUEUED_S = 60  # a queued check whose message was lost frees its project after this
ALERT_RESEND_AFTER = timedelta(minutes=15)
NOTICE = {
    "bind": True,
    "max_retries": 8,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "soft_time_limit": 60,
    "time_limit": 90,
}


@shared_task(acks_late=True, ignore_result=True)
def billing_catch_up() -> int:
    recorded = runs_catch_up()
    for project_id in Project.objects.exclude(monthly_budget=0).values_list("pk", flat=True):
        _check(project_id)
    alerts_resend()
    return recorded


def _check_key(project_id: int) -> str:
    return f"budget-check-queued:{project_id}"


def budget_check_soon(project_id: int) -> None:
    """Check the project's budget once the current transaction commits, with at most one
    check queued per project (a burst of recordings costs one). Robust: a broker down loses
    nothing the catch-up does not check again."""

    def send() -> None:
        key = _check_key(project_id)
        if not cache.add(key, 1, timeout=CHECK_QUEUED_S):
            return
        try:
            budget_check_task.delay(project_id)
        except BaseException:
            cache.delete(key)
            raise

    transaction.on_commit(send, robust=True)


@shared_task(acks_late=True, ignore_result=True, reject_on_worker_lost=True)
def budget_check_task(project_id: int) -> None:
    cache.delete(_check_key(project_id))  # first: a recording committed from now queues another
    _check(project_id)


def _check(project_id: int) -> Outcome | None:
    with transaction.atomic():
        outcome = budget_check(project_id=project_id)
        if outcome is None:
            return None
        for alert_id in outcome.new_alerts:
            transaction.on_commit(_notify(alert_id), robust=True)
    if outcome.stop_running:
        budget_stop_running(outcome)
    return outcome


def _notify(alert_id: int) -> Callable[[], None]:
    """A closure, not a partial: Django's robust on_commit names the callback it logs."""

    def send() -> None:
        budget_alert_notify.delay(alert_id)

    return send


def budget_stop_running(outcome: Outcome) -> int:
    """Stop the project's admitted, live work, every kind (the project opted in): the panel
    stops it, as a site admin would, with the budget as the reason."""
    project = outcome.status.project
    access = ProjectAccess(project=project, role=None, is_admin=True)
    reason = f"stopped: {outcome.status.say()}"
    live = Workload.objects.filter(
        project=project, state__in=LIVE_STATES, stop_requested=False
    ).exclude(admitted_at=None)
    stopped = 0
    for workload in live.only("pk", "kind", "owner_id"):
        try:
            workload_stop(access=access, user=None, workload=workload, reason=reason)
        except (ValidationError, PermissionDenied):
            continue  # it ended meanwhile
        stopped += 1
    return stopped


def alerts_resend() -> int:
    """Alerts made over ALERT_RESEND_AFTER ago and never handed over (the worker died after
    the insert, or the message was lost): sent again."""
    stale = BudgetAlert.objects.filter(
        notified_at=None, created_at__lt=timezone.now() - ALERT_RESEND_AFTER
    )
    ids = list(stale.values_list("pk", flat=True)[:100])
    for alert_id in ids:
        budget_alert_notify.delay(alert_id)
    return len(ids)


def _retry_delay(retries: int) -> float:
    return webhook_retry_delay(retries)


@shared_task(**NOTICE)
def budget_alert_notify(self: Task, alert_id: int) -> None:
    """The webhook's task first (once), then the managers' e-mail; then it is handed over."""
    alert = BudgetAlert.objects.select_related("project").filter(pk=alert_id).first()
    if alert is None or alert.notified_at is not None:
        return
    if not self.request.retries:
        budget_alert_webhook.delay(alert_id)
    try:
        send_alert_email(alert)
    except Exception as exc:
        if self.request.retries < self.max_retries:
            raise self.retry(exc=exc, countdown=_retry_delay(self.request.retries)) from exc
        log.warning("budget alert %s: the e-mail was given up: %s", alert_id, exc)
    BudgetAlert.objects.filter(pk=alert_id, notified_at=None).update(notified_at=timezone.now())


@shared_task(**NOTICE)
def budget_alert_webhook(self: Task, alert_id: int) -> None:
    alert = BudgetAlert.objects.select_related("project").filter(pk=alert_id).first()
    if alert is None:
        return
    try:
        post_alert_webhook(alert)
    except Exception as exc:
        raise self.retry(exc=exc, countdown=_retry_delay(self.request.retries)) from exc
