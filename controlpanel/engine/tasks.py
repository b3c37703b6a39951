"""The engine's Celery tasks: thin, idempotent, keyed by ids (the logic is in admission.py,
reconcile.py and sweep.py, which only return what should happen next: this layer enqueues)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from controlpanel.buckets.services import buckets_recount_written
from controlpanel.core.metrics import store as metrics_store
from controlpanel.engine import logarchive, workspaces
from controlpanel.engine.admission import admit_jobs, release_workspace
from controlpanel.engine.backend import ensure_project
from controlpanel.engine.lifecycle import workload_ended
from controlpanel.engine.logs import archive_logs
from controlpanel.engine.models import LIVE_STATES, Workload
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.registry import kind_of, kinds
from controlpanel.engine.sweep import sweep
from controlpanel.projects.models import Project
from deploy.types import TransientError, WorkloadKind, WorkloadRef

log = logging.getLogger(__name__)
# Tasks keep the names they had in controlpanel/workloads/tasks.py: messages already queued,
# the beat schedule and the queue routes (settings.py) name them so.
NAMES = "controlpanel.workloads.tasks"
SWEEP_LOCK = "jobs-sweep-running"

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
    kind_of(job).driver.ended(job, run)  # a job's end notice; a notebook's stop is no news
    release_workspace(job=job)  # a clean run's claim (only a job's runs claim one)
    admit_soon(job.project_id)
    # What the job pushed changed its buckets' object counts and sizes.
    buckets_recount_written(project_id=job.project_id, volumes=job.volumes)
    archive_logs(job_id=job_id)
    try:  # the log is complete: out of PostgreSQL (the retention task retries a failure)
        logarchive.move_to_store(job_id=job_id, run=run)
    except Exception:
        log.warning("log of run %s of %s not moved to object storage yet", run, job_id)


@shared_task(name=f"{NAMES}.retention", **RETRY)
def retention() -> dict[str, int]:
    """Ended logs still in PostgreSQL moved to object storage, archives past
    LOG_ARCHIVE_RETENTION_DAYS deleted, deleted workloads' archives still listed deleted (the
    store was down), failed runs' workspaces past WORKSPACE_KEPT_DAYS deleted."""
    return {
        "logs_moved": logarchive.move_pending(),
        "logs_deleted": logarchive.expire(),
        "deleted_logs_purged": logarchive.purge()[0],
        "workspaces_deleted": workspaces.expire(),
    }


@shared_task(name=f"{NAMES}.log_objects_delete", **RETRY)
def log_objects_delete(ids: list[int]) -> int:
    """Delete a deleted workload's archived log objects (listed with its delete); a store that
    is down retries this task, then the retention task. Returns how many were deleted."""
    deleted, left = logarchive.purge(ids)
    if left:
        raise TransientError(f"{left} log objects not deleted yet: the store did not answer")
    return deleted


@shared_task(name=f"{NAMES}.job_cleanup", **RETRY)
def job_cleanup(refs: list[Any], kind: str = "job") -> None:
    """Delete the objects of a deleted workload's runs (404 = already gone)."""

    driver = kind_of(kind).driver
    for project, namespace, job_id, run in refs:
        driver.delete_objects(WorkloadRef(WorkloadKind(kind), project, namespace, job_id, run))


def sweep_now() -> dict[str, int]:
    """One sweep (sweep.py), then what it found to do: the tasks it names, and every kind's
    chores (an idle notebook's stop, a lost end notice's resend). What it counted."""

    found = sweep()
    counts = found.counts
    for job_id in found.redrive:
        counts["relaunched"] += redrive(job_id)
    for project_id in found.admit:
        project_admit.delay(project_id)
    for job_id, run in found.finalize:
        job_finalize.delay(job_id, run)
    for kind in kinds():
        for count, chore in kind.chore_calls().items():
            counts[count] = chore()
    return counts


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
        counts = sweep_now()
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
