"""The jobs kind's tasks: its end notice (claimed once per run, then an e-mail and the
project's webhook, on the `notifications` queue; sent again by the sweep when a claim was never
handed over) and the retry of a failed final push. Thin, keyed by ids, like the engine's."""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial

from celery import Task, shared_task
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlpanel.engine.backend import get_backend
from controlpanel.engine.models import FINAL_STATES, Workload
from controlpanel.engine.tasks import NAMES, RETRY, job_reconcile
from controlpanel.engine.webhooks import webhook_retry_delay
from controlpanel.jobs.models import Job
from controlpanel.jobs.notifications import post_webhook, send_job_email
from controlpanel.jobs.request import job_request
from controlpanel.jobs.states import JobState

log = logging.getLogger(__name__)
# E-mails and webhooks wait on servers we do not run: they go to the `notifications` queue
# (settings.CELERY_TASK_ROUTES), which a worker of its own consumes (Procfile `notifier`), so
# a hung receiver holds up no reconcile; each try is short (deadlines, then these limits).
NOTICE_LIMITS = {"soft_time_limit": 60, "time_limit": 90}
# An end notice claimed this long ago and still not handed over lost its message (a crash
# between claim and send): the sweep sends it again. Longer than the e-mail's own retries.
NOTICE_RESEND_AFTER = timedelta(minutes=15)
EMAIL_RETRIES = 8
WEBHOOK_RETRIES = 8


@shared_task(name=f"{NAMES}.job_retry_push", **RETRY)
def job_retry_push(job_id: str) -> None:

    job = Job.objects.select_related("project", "flavor").filter(pk=job_id).first()
    if job is None:
        return
    # The run ends again after this push (DONE, or SYNC_FAILED once more): re-arm the
    # once-per-run notice so that end is told too. Before the push, so no end can slip by.
    Job.objects.filter(
        pk=job_id, run=job.run, state=JobState.FINALIZING, notified_run=job.run
    ).update(notified_run=job.run - 1, notice_sent_run=job.run - 1)
    get_backend().retry_push(job=job_request(job))
    job_reconcile.apply_async((job_id,), countdown=2)


def claim_notice(job: Workload, run: int) -> None:
    """Claimed with a conditional update: a duplicate or retried task never notifies twice,
    and a job that left its final state (push retried, run again) waits for its next end.
    Sent from the claim's commit; a claim never handed over is sent again (notices_resend)."""

    with transaction.atomic():
        claimed = Job.objects.filter(
            pk=job.pk, run=run, state=job.state, notified_run__lt=run
        ).update(notified_run=run, notice_claimed_at=timezone.now())
        if claimed:
            transaction.on_commit(partial(job_notify.delay, str(job.pk), run, job.state))


def notices_resend() -> int:
    """Send again the end notices claimed over NOTICE_RESEND_AFTER ago and never handed over
    (the worker died after the claim, or the message was lost), each at most once a period;
    job_notify drops one that was handed over meanwhile. Called by the sweep."""

    now = timezone.now()
    unsent = Job.objects.filter(
        state__in=FINAL_STATES,
        notified_run=F("run"),
        notice_sent_run__lt=F("run"),
        notice_claimed_at__lt=now - NOTICE_RESEND_AFTER,
    )
    resent = 0
    for job_id, run, state in unsent.values_list("pk", "run", "state")[:100]:
        with transaction.atomic():
            if unsent.filter(pk=job_id, run=run).update(notice_claimed_at=now):
                transaction.on_commit(partial(job_notify.delay, str(job_id), run, state))
                resent += 1
    return resent


def _still_ended(job_id: str, run: int | None, state: str | None, *related: str) -> Job | None:
    """The job if it is still in the final `state` of `run` that was claimed (None: messages
    queued before these arguments existed), else None: a job moved on (push retried, run
    again) is told about at its next end, never with a state it is no longer in."""

    job = Job.objects.select_related(*related).filter(pk=job_id).first()
    if job is None or not job.is_final:
        return None
    if (run is not None and job.run != run) or (state is not None and job.state != state):
        return None
    return job


@shared_task(
    name=f"{NAMES}.job_notify",
    bind=True,
    max_retries=EMAIL_RETRIES,
    acks_late=True,
    reject_on_worker_lost=True,
    **NOTICE_LIMITS,
)
def job_notify(self: Task, job_id: str, run: int | None = None, state: str | None = None) -> None:
    """The webhook's task, then the e-mail; then the notice counts as handed over."""

    job = _still_ended(job_id, run, state, "owner", "project")
    if job is None or job.notice_sent_run >= job.run:
        return  # moved on, or handed over already (a resend that crossed the first message)
    if not self.request.retries:  # first, once: a mail failure neither costs nor repeats it
        job_webhook.delay(job_id, job.run, job.state)
    try:
        send_job_email(job)
    except Exception as exc:  # retried, then given up (not sent again by the sweep)
        if self.request.retries < self.max_retries:
            countdown = webhook_retry_delay(self.request.retries)
            raise self.retry(exc=exc, countdown=countdown) from exc
        log.warning("job %s: the end notice e-mail was given up: %s", job_id, exc)
    Job.objects.filter(
        pk=job.pk, run=job.run, notified_run=job.run, notice_sent_run__lt=job.run
    ).update(notice_sent_run=job.run)


@shared_task(
    name=f"{NAMES}.job_webhook",
    bind=True,
    max_retries=WEBHOOK_RETRIES,
    acks_late=True,
    reject_on_worker_lost=True,
    **NOTICE_LIMITS,
)
def job_webhook(self: Task, job_id: str, run: int | None = None, state: str | None = None) -> None:

    job = _still_ended(job_id, run, state, "project")
    if job is None:
        return
    try:
        post_webhook(job)
    except Exception as exc:  # any failure to deliver: retried, then given up
        raise self.retry(exc=exc, countdown=webhook_retry_delay(self.request.retries)) from exc
