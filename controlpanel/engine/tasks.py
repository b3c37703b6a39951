"""Celery tasks: thin, idempotent, keyed by ids (see reconcile.py for the logic)."""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlpanel.buckets.services import buckets_recount_written
from controlpanel.core.metrics import store as metrics_store
from controlpanel.engine.admission import admit_jobs, release_workspace
from controlpanel.engine.backend import ensure_project, get_backend, job_request
from controlpanel.engine.lifecycle import workload_ended
from controlpanel.engine.logs import archive_logs
from controlpanel.engine.models import FINAL_STATES, LIVE_STATES, Job, JobState, Kind, Workload
from controlpanel.engine.notifications import post_webhook, send_job_email
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.sweep import sweep
from controlpanel.projects.models import Project
from deploy.types import TransientError, WorkloadKind, WorkloadRef

log = logging.getLogger(__name__)
# Tasks keep the names they had in controlpanel/workloads/tasks.py: messages already queued,
# the beat schedule and the queue routes (settings.py) name them so.
NAMES = "controlpanel.workloads.tasks"
SWEEP_LOCK = "jobs-sweep-running"
# E-mails and webhooks wait on servers we do not run: they go to the `notifications` queue
# (settings.CELERY_TASK_ROUTES), which a worker of its own consumes (Procfile `notifier`), so
# a hung receiver holds up no reconcile; each try is short (deadlines, then these limits).
NOTICE_LIMITS = {"soft_time_limit": 60, "time_limit": 90}
# An end notice claimed this long ago and still not handed over lost its message (a crash
# between claim and send): the sweep sends it again. Longer than the e-mail's own retries.
NOTICE_RESEND_AFTER = timedelta(minutes=15)
EMAIL_RETRIES = 8

RETRY = {
    # SoftTimeLimitExceeded: a step that hung past the soft limit (settings) is tried again.
    "autoretry_for": (TransientError, ConnectionError, TimeoutError, SoftTimeLimitExceeded),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "max_retries": 20,
    "acks_late": True,
    "reject_on_worker_lost": True,
}


# A queued admission whose message was lost frees its project's place after this long.
ADMIT_QUEUED_S = 60


def _admit_key(project_id: int) -> str:
    return f"admit-queued:{project_id}"


def admit_soon(project_id: int) -> None:
    """Admit the project's waiting work once the current transaction commits, with at most one
    admission queued per project: a burst of submits costs one pass over the queue, not one
    each (every pass reads and records every waiting job). `project_admit` clears the mark
    as it starts, before it reads the waiting jobs, so a row committed after that read queues
    the next one: nothing is left waiting. Outside a transaction, at once."""

    # robust: a broker down at that moment fails no request whose rows are committed; the
    # sweep admits what waits.
    transaction.on_commit(lambda: _enqueue_admit(project_id), robust=True)


def _enqueue_admit(project_id: int) -> None:
    key = _admit_key(project_id)
    if not cache.add(key, 1, timeout=ADMIT_QUEUED_S):
        return  # one is queued and has not read the waiting jobs yet: it will see this one
    try:
        project_admit.delay(project_id)
    except BaseException:
        cache.delete(key)  # never sent: the next submit (or the sweep) must send one
        raise


@shared_task(name=f"{NAMES}.project_admit", **RETRY)
def project_admit(project_id: int) -> None:
    """Admit queued jobs of a project that fit its quotas; reconcile the admitted ones."""

    cache.delete(_admit_key(project_id))  # first: what commits from now on queues another
    for job_id in admit_jobs(project_id=project_id):
        job_reconcile.delay(job_id)


@shared_task(name=f"{NAMES}.job_reconcile", **RETRY)
def job_reconcile(job_id: str) -> None:

    reconcile(job_id)


REDRIVE_FIRST_S = 10.0
REDRIVE_MAX_S = 300.0
# Remembered this long after the last re-send: a job that stops needing them starts over.
REDRIVE_FORGET_S = 3600
# time.time, replaceable in tests that step through the backoff.
clock: Callable[[], float] = time.time


def redrive(job_id: str) -> bool:
    """Re-send job_reconcile for an admitted job that was never launched (its task was lost, or
    keeps failing), backing off per job: 10 s after the first re-send, then 20 s, 40 s...
    up to 5 minutes. Returns whether it was sent. Called by the sweep, every sweep."""

    key = f"job-redrive:{job_id}"
    sent, next_at = cache.get(key, (0, 0.0))
    now = clock()
    if now < next_at:
        return False
    wait = min(REDRIVE_FIRST_S * 2 ** min(sent, 16), REDRIVE_MAX_S)
    cache.set(key, (sent + 1, now + wait), timeout=REDRIVE_FORGET_S)
    job_reconcile.delay(job_id)
    return True


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


def _finalize_after_commit(sender: object, *, workload_id: str, run: int, **_: object) -> None:
    """A run ended (lifecycle.workload_ended): finalize it once its end is committed. Robust:
    a broker down at that moment costs no committed state; the sweep sends a finalize that
    never left (JOB_FINALIZE_GRACE_SECONDS)."""
    transaction.on_commit(lambda: job_finalize.delay(workload_id, run), robust=True)


workload_ended.connect(_finalize_after_commit, dispatch_uid="workloads-finalize")


@shared_task(name=f"{NAMES}.job_finalize", **RETRY)
def job_finalize(job_id: str, run: int) -> None:
    """After a final state: notify once, free the quota (and a clean run's workspace claim),
    archive the log (in that order: a failing archive retries this task, and must cost neither
    the notice nor the quota)."""

    job = Workload.objects.select_related("project").filter(pk=job_id, run=run).first()
    if job is None:
        return
    if job.kind == Kind.JOB:  # a notebook's stop is no news, and it keeps its workspace
        if job.is_final:
            _claim_notice(job, run)
        release_workspace(job=job)
    admit_soon(job.project_id)
    # What the job pushed changed its buckets' object counts and sizes.
    buckets_recount_written(project_id=job.project_id, volumes=job.volumes)
    archive_logs(job_id=job_id)


def _claim_notice(job: Workload, run: int) -> None:
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


WEBHOOK_RETRIES = 8
WEBHOOK_RETRY_MAX_S = 60.0


def webhook_retry_delay(retries: int) -> float:
    """Seconds before retry number `retries` + 1 of a webhook (or a notice's e-mail): doubling
    from WEBHOOK_RETRY_BASE_MS up to a minute, the second half of it random (receivers that
    were down are not hit all at once)."""

    ceiling = min(WEBHOOK_RETRY_MAX_S, settings.WEBHOOK_RETRY_BASE_MS / 1000 * 2**retries)
    return random.uniform(ceiling / 2, ceiling)  # noqa: S311 (jitter, not a secret)


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


@shared_task(name=f"{NAMES}.job_cleanup", **RETRY)
def job_cleanup(refs: list[Any]) -> None:
    """Delete the objects of a deleted job's runs (404 = already gone)."""

    backend = get_backend()
    for project, namespace, job_id, run in refs:
        backend.delete_job(ref=WorkloadRef(WorkloadKind.JOB, project, namespace, job_id, run))


# Ends before its lock expires: no second sweep starts beside one still running.
@shared_task(
    name=f"{NAMES}.jobs_sweep",
    acks_late=True,
    ignore_result=True,
    soft_time_limit=540,
    time_limit=570,
)
def jobs_sweep() -> dict[str, int]:
    """Level-triggered observation: list everything, record what changed (beat, periodic).

    One sweep at a time: with many live jobs a sweep can outlast the beat period, and a second
    worker starting the next one would only repeat the same work."""

    token = uuid.uuid4().hex
    # A sweep killed with its worker frees the lock after JOB_SWEEP_LOCK_SECONDS: until then no
    # sweep runs (no refinalize, no re-drive), so it is short; a sweep outlasting it may meet
    # a second one, which only repeats idempotent work.
    if not cache.add(SWEEP_LOCK, token, timeout=settings.JOB_SWEEP_LOCK_SECONDS):
        return {"skipped": 1}
    started = time.monotonic()
    try:
        counts = sweep()
        metrics_store.note_sweep(seconds=time.monotonic() - started)
        return counts
    finally:
        if cache.get(SWEEP_LOCK) == token:
            cache.delete(SWEEP_LOCK)


@shared_task(name=f"{NAMES}.pod_credentials_renew", acks_late=True, ignore_result=True)
def pod_credentials_renew() -> int:
    """Keep the credentials of projects with live work fresh (beat, periodic): STS keys last
    hours, jobs days. `ensure_project` re-issues what is past half its life and re-applies the
    project's Secret; the sync sidecars read their files again before each push."""

    projects = Project.objects.filter(workloads__state__in=LIVE_STATES).distinct()
    for project in projects:
        ensure_project(project)
    return len(projects)
