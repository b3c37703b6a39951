"""`reconcile(id)`: move the cluster toward what a workload row says, then record what is seen.

Idempotent: names are deterministic, so a duplicate or retried call creates nothing twice
(the backend adopts what exists). The row is locked for the whole step, so concurrent
reconciles of one workload (a retried task, the sweep) take turns. Every kind takes the same
steps; only how the backend is driven (`_DRIVERS`) and observed (`_observe`) is the kind's.
"""

from __future__ import annotations

import logging

from django.db import transaction

from controlpanel.engine.backend import (
    app_request,
    ensure_project,
    get_backend,
    job_ref,
    job_request,
    missing_secrets,
    notebook_request,
)
from controlpanel.engine.datastores import launch_refusal
from controlpanel.engine.lifecycle import apply_observation, end_runs, is_behind, record_state
from controlpanel.engine.models import (
    FINAL_STATES,
    AppState,
    JobState,
    Kind,
    NotebookState,
    Workload,
)
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
    if job.admitted_at is None and job.state != NotebookState.DELETING:
        return job  # waits for admission (admission.py)
    if job.launched_run < job.run and not job.stop_requested:
        refused = launch_refusal(project=job.project, volumes=job.volumes) or _secret_refusal(job)
        if refused:  # nothing is created: no namespace change, no Job, no process
            record_state(job, _FAILED[Kind(job.kind)], f"not started: {refused}")
            return job
    try:
        observed = _DRIVERS[Kind(job.kind)](job)
    except TransientError:
        raise  # the task retries with backoff
    except DeployError as exc:
        record_state(job, JobState.ERROR, str(exc))
        return job
    if observed is not None:
        apply_observation(job, observed, fresh=True)
    return job


_FAILED = {
    Kind.JOB: JobState.FAILED,
    Kind.NOTEBOOK: NotebookState.FAILED,
    Kind.APP: AppState.FAILED,
}


def _secret_refusal(job: Workload) -> str:
    """A secret the env references was deleted since submit: the pod could not start."""
    missing = missing_secrets(job)
    if not missing:
        return ""
    return f"the project has no secret named {', '.join(missing)} (env references it)"


def _push_refused(job: Workload) -> bool:
    """The final push is a launch too (it writes, and with rwd deletes, in the buckets): a
    volume no longer the project's ends the run SYNC_FAILED, the workspace kept, no push."""
    refused = launch_refusal(project=job.project, volumes=job.volumes)
    if refused:
        record_state(job, JobState.SYNC_FAILED, f"push not started: {refused}")
    return bool(refused)


def _drive_job(job: Workload) -> ObservedWorkload | None:
    """What the backend shows after moving it on; None when the job ended here instead."""
    backend = get_backend()
    request = job_request(job)
    ensure_project(job.project)
    if job.stop_requested:
        backend.stop_job(job=request)
        observed = backend.observe_job(ref=job_ref(job))
        # A stopped run still pushes its rw volumes; apply only starts that push here,
        # since the run's objects exist (an unlaunched job is stopped without the backend).
        if not observed.needs_apply:
            return observed
        return None if _push_refused(job) else backend.apply_job(job=request)
    if job.launched_run < job.run:
        job.launched_run = job.run
        job.save(update_fields=["launched_run", "updated_at"])
    elif launch_refusal(project=job.project, volumes=job.volumes):
        # A volume left the project during the run: apply could start the push; look only.
        observed = backend.observe_job(ref=job_ref(job))
        return None if observed.needs_apply and _push_refused(job) else observed
    return backend.apply_job(job=request)


def _drive_notebook(notebook: Workload) -> ObservedWorkload | None:
    """Running or stopped as the row says (the workspace survives both); a deleted one's
    objects go, and the row with them once nothing is left."""
    backend = get_backend()
    if notebook.state == NotebookState.DELETING:
        backend.delete_notebook(ref=job_ref(notebook))
        if backend.observe_notebook(ref=job_ref(notebook)).phase is Phase.GONE:
            end_runs(notebook)
            notebook.delete()  # its runs stay, for billing
        return None
    ensure_project(notebook.project)
    if notebook.launched_run < notebook.run and not notebook.stop_requested:
        notebook.launched_run = notebook.run
        notebook.save(update_fields=["launched_run", "updated_at"])
    return backend.apply_notebook(notebook=notebook_request(notebook))


def _drive_app(app: Workload) -> ObservedWorkload | None:
    """Serving or stopped as the row says, at the same address; a deleted one's objects go,
    and the row with them once nothing is left."""
    backend = get_backend()
    if app.state == AppState.DELETING:
        backend.delete_app(ref=job_ref(app))
        if backend.observe_app(ref=job_ref(app)).phase is Phase.GONE:
            end_runs(app)
            app.delete()  # its runs stay, for billing
        return None
    ensure_project(app.project)
    if app.launched_run < app.run and not app.stop_requested:
        app.launched_run = app.run
        app.save(update_fields=["launched_run", "updated_at"])
    return backend.apply_app(app=app_request(app))


_DRIVERS = {Kind.JOB: _drive_job, Kind.NOTEBOOK: _drive_notebook, Kind.APP: _drive_app}


def _observe(job: Workload) -> ObservedWorkload:
    if job.kind == Kind.APP:
        return get_backend().observe_app(ref=job_ref(job))
    if job.kind == Kind.NOTEBOOK:
        return get_backend().observe_notebook(ref=job_ref(job))
    return get_backend().observe_job(ref=job_ref(job))


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
    fresh = observed is None
    if observed is None:
        observed = _observe(job)
    if observed.needs_apply and job.kind == Kind.JOB:
        if _push_refused(job):
            return job
        observed, fresh = get_backend().apply_job(job=job_request(job)), True
    apply_observation(job, observed, fresh=fresh)
    return job
