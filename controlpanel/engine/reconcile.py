"""`reconcile(id)`: move the cluster toward what a workload row says, then record what is seen.

Idempotent: names are deterministic, so a duplicate or retried call creates nothing twice
(the backend adopts what exists). The row is locked for the whole step, so concurrent
reconciles of one workload (a retried task, the sweep) take turns. Every kind takes the same
steps; only how the backend is driven and observed is the kind's (its driver, registry.py).
"""

from __future__ import annotations

import logging

from django.db import transaction

from controlpanel.engine.backend import missing_secrets
from controlpanel.engine.datastores import launch_refusal
from controlpanel.engine.lifecycle import apply_observation, is_behind, record_state
from controlpanel.engine.models import DELETING, FINAL_STATES, Workload
from controlpanel.engine.registry import kind_of
from controlpanel.engine.replicas import ends_replicas
from deploy.types import DeployError, ObservedWorkload, Phase, TransientError

log = logging.getLogger(__name__)


def _locked(job_id: str) -> Workload | None:
    return (
        Workload.objects.select_for_update(of=("self",))
        .select_related("project", "flavor")
        .filter(pk=job_id)
        .first()
    )


@transaction.atomic
def reconcile(job_id: str) -> Workload | None:
    """One reconcile step of one workload; returns it, or None if it is gone."""
    job = _locked(job_id)
    if job is None or job.state in FINAL_STATES:
        return job
    if job.admitted_at is None and job.state != DELETING:
        return job  # waits for admission (admission.py)
    kind = kind_of(job)
    if job.launched_run < job.run and not job.stop_requested:
        refused = launch_refusal(project=job.project, volumes=job.volumes) or _secret_refusal(job)
        if refused:  # nothing is created: no namespace change, no Job, no process
            record_state(job, kind.failed, f"not started: {refused}")
            return job
    try:
        observed = kind.driver.drive(job)
    except TransientError:
        raise  # the task retries with backoff
    except DeployError as exc:
        record_state(job, kind.error, str(exc))
        return job
    if observed is not None:
        apply_observation(job, observed, fresh=True)
    return job


def _secret_refusal(job: Workload) -> str:
    """A secret the env references was deleted since submit: the pod could not start."""
    missing = missing_secrets(job)
    if not missing:
        return ""
    return f"the project has no secret named {', '.join(missing)} (env references it)"


@transaction.atomic
def observe(job_id: str, observed: ObservedWorkload | None = None) -> Workload | None:
    """Record an observation (from the sweep or a watch) without driving anything; a run whose
    push must be started (`needs_apply`) is reconciled."""
    job = _locked(job_id)
    if job is None or job.state in FINAL_STATES:
        return job
    if job.admitted_at is None:
        return job
    if observed is not None and observed.phase is Phase.QUEUED and is_behind(job, observed):
        observed = None  # back in Kueue's queue, or a stale listing: only a fresh read tells
    if observed is not None and ends_replicas(job, observed):
        observed = None  # a replica gone, or made after the listing: only a fresh read tells
    driver = kind_of(job).driver
    fresh = observed is None
    if observed is None:
        observed = driver.observe(job)
    if observed.needs_apply:
        pushed = driver.start_push(job)
        if pushed is None:
            return job  # the run ended here (its push refused)
        observed, fresh = pushed, True
    apply_observation(job, observed, fresh=fresh)
    return job
