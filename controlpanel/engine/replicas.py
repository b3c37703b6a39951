"""An app's replicas as billing runs (#16: RUNNING replica-minutes × the flavor's rate): each
replica (a pod, or a local server's start) is a `JobRun` of its own, so the ledger bills
every replica like a job's pod, and a replica that goes ends its run."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from controlpanel.engine.models import JobRun, Workload
from deploy.types import ObservedWorkload, ReplicaRun

# Where an app's row keeps the replicas it bills now (their run uids, sorted): an observation
# whose replicas differ is recorded even when the app's state is the same (sweep._differs).
REPLICA_UIDS = "replica_uids"
# The keys of `progress` written from observations (an app's replicas), not from the log:
# the log collector's snapshot keeps them.
OBSERVED_PROGRESS = ("replicas", REPLICA_UIDS)


def serving_replicas(observed: ObservedWorkload) -> list[str]:
    """The uids of the replicas an observation shows running (not ended), sorted."""
    return sorted(r.uid for r in observed.replica_runs or () if r.finished_at is None)


def ends_replicas(job: Workload, observed: ObservedWorkload) -> bool:
    """Whether recording the observation would end a replica's run: one the row bills is
    missing from it. A listing may be older than what opened that run (a watch saw a new pod
    after the sweep listed), and an ended run is never opened again: only a fresh read may
    end one."""
    if observed.replica_runs is None:
        return False
    billed = (job.progress or {}).get(REPLICA_UIDS) or []
    return bool(set(billed) - set(serving_replicas(observed)))


def record_replicas(job: Workload, replicas: tuple[ReplicaRun, ...], *, serving: bool) -> None:
    """Each replica of an app is a run of its own (billing: replica-minutes): opened when its
    server has started, ended with the backend's end time, or when the backend no longer
    has it (scaled down, replaced by a rolling update, deleted by a JobSet's group restart):
    by the deletion's deadline its pod reported while terminating, else now (`gone_at`).
    A run once ended is never opened again (an older observation that still lists it), and
    its start never moves later (a restarted server is the same replica, billed since its
    first start). Like a job's run, an open one is saved at each observation (the ledger
    bills it up to now).
    `serving`: the app is RUNNING now or was in this run; before, no run is opened, so an app
    whose server failed while it loaded (a missing model) is billed nothing."""
    now = timezone.now()
    seen = {replica.uid: replica for replica in replicas}
    known = {run.uid: run for run in JobRun.objects.filter(uid__in=seen)}
    for uid, replica in seen.items():
        run = known.get(uid)
        if run is None and not serving:
            continue  # only RUNNING time is billed: an app that never served bills nothing
        if run is None:
            run = JobRun(
                uid=uid,
                job=job,
                project_id=job.project_id,
                run=job.run,
                flavor_id=job.flavor_id,
                units=job.gpu,
                started_at=replica.started_at,
            )
        elif run.finished_at is not None or run.job_id != job.pk:
            continue
        run.started_at = min(run.started_at or replica.started_at, replica.started_at)
        if replica.finished_at is not None:
            run.finished_at = max(replica.finished_at, run.started_at)
            run.exit_code = replica.exit_code
        if replica.ends_by is not None:  # being deleted: gone by then at the latest
            run.ends_by = min(run.ends_by or replica.ends_by, replica.ends_by)
        run.node = replica.node or run.node
        run.save()
    gone = JobRun.objects.filter(job=job, run=job.run, finished_at=None).exclude(uid__in=seen)
    for run in gone.exclude(started_at=None):
        run.finished_at = gone_at(run, now)
        run.save()  # the ledger follows (billing/receivers.py)


def gone_at(run: JobRun, now: datetime, *, evicted_at: datetime | None = None) -> datetime:
    """When a run whose pod went without its end seen really ended (one rule for every path:
    a group restart's or a scale-down's replica here, an evicted pod in evictions.py):
    - by the deletion's deadline seen while it terminated (`ends_by`: its own end at the
      latest, billed to it rather than to when the panel noticed it gone), once that deadline
      has passed;
    - else, evicted by Kueue, at the eviction (`evicted_at`, when its deletion began), unless
      that is older than the pod (a stale condition: not its own eviction): a pod gone before
      its deadline ended by itself, and no minute is billed after it ended (Kueue re-admits
      the job once it is gone, and the next pod may start within the same second);
    - else the panel's now.
    Never past the panel's now (a cluster clock ahead), never before its start."""
    started = run.started_at
    if run.ends_by is not None and (run.ends_by <= now or evicted_at is None):
        end = run.ends_by
    elif evicted_at is not None and (started is None or evicted_at >= started):
        end = evicted_at
    else:
        end = now
    end = min(end, now)
    return max(end, started or end)
