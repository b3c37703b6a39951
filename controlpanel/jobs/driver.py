"""How the engine runs a job: a reconcile step (apply, stop, start the final push unless a
volume left the project), what its observations mean (observation.py), its orphans, and its
end notice."""

from __future__ import annotations

import logging

from controlpanel.engine.backend import ensure_project, get_backend, job_ref
from controlpanel.engine.datastores import launch_refusal
from controlpanel.engine.driver import Driver
from controlpanel.engine.lifecycle import record_launch, record_state
from controlpanel.engine.models import LIVE_STATES, Workload
from controlpanel.engine.sweep import ORPHANS_PER_SWEEP, grace_start, rows_of, settled
from controlpanel.jobs import observation
from controlpanel.jobs.request import job_request
from controlpanel.jobs.states import JobState as S
from controlpanel.jobs.tasks import claim_notice
from deploy.types import ObservedWorkload, Phase, WorkloadRef

log = logging.getLogger(__name__)
# Phases of a run that holds (or waits for) its pod's GPUs.
HOLDING = frozenset({Phase.QUEUED, Phase.PENDING, Phase.INITIALIZING, Phase.RUNNING})


def push_refused(job: Workload) -> bool:
    """The final push is a launch too (it writes, and with rwd deletes, in the buckets): a
    volume no longer the project's ends the run SYNC_FAILED, the workspace kept, no push."""
    refused = launch_refusal(project=job.project, volumes=job.volumes)
    if refused:
        record_state(job, S.SYNC_FAILED, f"push not started: {refused}")
    return bool(refused)


class JobDriver(Driver):
    def drive(self, job: Workload) -> ObservedWorkload | None:
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
            return None if push_refused(job) else backend.apply_job(job=request)
        if job.launched_run < job.run:
            record_launch(job)
        elif launch_refusal(project=job.project, volumes=job.volumes):
            # A volume left the project during the run: apply could start the push; look only.
            observed = backend.observe_job(ref=job_ref(job))
            return None if observed.needs_apply and push_refused(job) else observed
        return backend.apply_job(job=request)

    def observe(self, job: Workload) -> ObservedWorkload:
        return get_backend().observe_job(ref=job_ref(job))

    def targets(self, job: Workload, observed: ObservedWorkload) -> list[tuple[str, str]]:
        return observation.job_states(job, observed)

    def passed(self, job: Workload, observed: ObservedWorkload) -> list:  # type: ignore[type-arg]
        return observation.passed_states(job, observed)

    def stale(self, job: Workload, observed: ObservedWorkload) -> bool:
        return observation.retried_push_failed(job, observed)

    def start_push(self, job: Workload) -> ObservedWorkload | None:
        return None if push_refused(job) else get_backend().apply_job(job=job_request(job))

    def delete_objects(self, ref: WorkloadRef) -> None:
        get_backend().delete_job(ref=ref)

    def orphans(self, observations: list[ObservedWorkload]) -> int:
        return collect_orphans(observations)

    def ended(self, job: Workload, run: int) -> None:
        if job.is_final:
            claim_notice(job, run)


def collect_orphans(runs: list[ObservedWorkload]) -> int:
    """Delete what runs on for no live job: the objects of a run whose row ended (and was
    finalized) or moved on to a later run. The case that needs it: the Job was created,
    the reconcile's transaction rolled back, and 'stop' then ended the never-launched row
    without the cluster; its pod kept its GPUs, out of the quota and unbilled. A run no row
    names at all is not deleted here (engine/orphans.py: a restored dump's missing rows).

    Only after `JOB_ORPHAN_GRACE_SECONDS`, from the row's end and the objects' creation (a
    row read before a commit must not cost a run). SYNC_FAILED keeps everything (the retried
    push needs the Job and the claim); ERROR keeps its Job and claim (data to rescue) but
    its pods are stopped. Returns how many runs were acted on, at most ORPHANS_PER_SWEEP."""
    runs = settled(runs)
    rows = rows_of(runs)
    backend, acted = get_backend(), 0
    for seen in runs:
        row = rows.get(seen.id)
        if row is not None and row.project.namespace != seen.namespace:
            row = None  # another project's job id in this namespace: nothing of ours
        action = _orphan_action(row, seen)
        if not action:
            continue
        log.warning("orphan run %s of job %s in %s: %s", seen.run, seen.id, seen.namespace, action)
        if action == "stop" and row is not None:
            backend.stop_job(job=job_request(row))
        else:
            backend.delete_job(ref=seen.ref)
        acted += 1
        if acted == ORPHANS_PER_SWEEP:
            break
    return acted


def _orphan_action(row: Workload | None, seen: ObservedWorkload) -> str:
    """What to do with the objects of a run no live row of that run claimed: "delete",
    "stop", or "" to leave them."""
    if row is None or row.run < seen.run:
        return ""  # no row names it: engine/orphans.py's, with its graces
    if row.run > seen.run:
        return "delete"  # an earlier run of a job that ran again
    if row.state in LIVE_STATES or not row.logs_archived or row.state_changed_at > grace_start():
        return ""  # running, or not finalized yet: job_finalize still reads the run
    if row.state in (S.SYNC_FAILED, S.ERROR):  # the claim is kept
        return "stop" if row.state == S.ERROR and seen.phase in HOLDING else ""
    return "delete"


DRIVER = JobDriver()
