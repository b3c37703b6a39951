"""The project's quotas, enforced at admission: first in, first out.

A job waits in QUEUED (unadmitted) while what it needs would take the project over one of its
quotas: GPUs, CPU, memory, pods (one per running job) or workspace storage (a run with rw
volumes holds a claim from admission until it ends cleanly; after SYNC_FAILED or ERROR the claim
is kept, and still counts). Its reason names the quota, what is in use and what the job needs,
and its place in the queue. A job needing none of what the jobs ahead wait for may pass them (a
CPU-only job behind one waiting for GPUs); nothing else overtakes. The amounts are the pod's own
requests, the push sidecar's included, as the namespace's ResourceQuota counts them. The
project row is locked while admitting, so two workers never admit past a quota.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlpanel.projects.models import Project
from controlpanel.workloads.backend import get_backend, job_ref
from controlpanel.workloads.lifecycle import record_state
from controlpanel.workloads.models import LIVE_STATES, Job, JobState
from storage.volumes import Mode, parse_volume_spec

# The push sidecar's requests (deploy/manifests/common.py, `sync_container`): it runs beside
# the user's container, so the pod asks for both.
SIDECAR_MILLICPU = 250
SIDECAR_MEMORY_MIB = 512
# Final states that keep the run's workspace claim (a push to retry, or data to rescue); the
# clean ends release it.
CLAIM_KEPT_STATES = frozenset({JobState.SYNC_FAILED, JobState.ERROR})
CLEAN_END_STATES = frozenset({JobState.DONE, JobState.FAILED, JobState.INTERRUPTED})


@dataclass(frozen=True)
class Need:
    """What one job run takes of its project's quotas (or what all of them take)."""

    gpus: int = 0
    millicpu: int = 0
    memory_mib: int = 0
    pods: int = 0
    storage_gib: int = 0

    def __add__(self, other: Need) -> Need:
        return Need(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True)
class Quota:
    """One quota of a project: which `Need` field it bounds, and how to say it."""

    need: str
    field: str
    label: str
    unit: str
    scale: int = 1
    zero_is_unlimited: bool = True

    def limit(self, project: Project) -> int | None:
        value = int(getattr(project, self.field))
        return None if value == 0 and self.zero_is_unlimited else value * self.scale

    def say(self, amount: int) -> str:
        return f"{amount / self.scale:g}"


QUOTAS = (
    Quota("gpus", "gpu_quota", "GPU", "GPUs", zero_is_unlimited=False),
    Quota("millicpu", "cpu_quota", "CPU", "vCPU", scale=1000),
    Quota("memory_mib", "memory_gib_quota", "memory", "GiB", scale=1024),
    Quota("pods", "pod_quota", "pod", "pods"),
    Quota("storage_gib", "storage_gib_quota", "storage", "GiB"),
)


def job_need(job: Job, *, claim: bool = True) -> Need:
    """The pod's requests of one run, and its workspace claim when it has rw volumes."""
    pushes = any(parse_volume_spec(v).mode in (Mode.RW, Mode.RWD) for v in job.volumes)
    flavor, units = job.flavor, job.gpu
    return Need(
        gpus=flavor.gpus_per_unit * units,
        millicpu=flavor.vcpu_per_unit * units * 1000 + (SIDECAR_MILLICPU if pushes else 0),
        memory_mib=flavor.memory_gib_per_unit * units * 1024
        + (SIDECAR_MEMORY_MIB if pushes else 0),
        pods=1,
        storage_gib=settings.JOB_WORKSPACE_GIB if pushes and claim else 0,
    )


def project_usage(*, project: Project) -> Need:
    """What the admitted, unfinished runs take, plus the claims that finished runs keep."""
    total = Need()
    # LIVE, not only ADMITTED_STATES: a job admitted a moment ago is still QUEUED (with its
    # admitted_at) until its first reconcile, and holds its share already.
    running = Job.objects.filter(project=project, state__in=LIVE_STATES)
    for job in running.exclude(admitted_at=None).select_related("flavor"):
        total += job_need(job)
    kept = Job.objects.filter(project=project, state__in=CLAIM_KEPT_STATES)
    for job in kept.exclude(admitted_at=None).select_related("flavor"):
        total += Need(storage_gib=job_need(job).storage_gib)
    return total


def release_workspace(*, job: Job) -> None:
    """A run that ended cleanly has nothing left to push: its workspace claim goes, and the
    storage quota it held with it."""
    has_claim = job_need(job).storage_gib > 0
    if has_claim and job.state in CLEAN_END_STATES and job.launched_run >= job.run:
        get_backend().release_workspace(ref=job_ref(job))


def waiting_jobs(*, project: Project) -> list[Job]:
    return list(
        Job.objects.filter(project=project, state=JobState.QUEUED, admitted_at=None)
        .select_related("flavor")
        .order_by("queued_at", "created_at")
    )


def short_of(project: Project, used: Need, need: Need) -> Quota | None:
    """The first quota this need would take the project over, or None when it fits."""
    for quota in QUOTAS:
        limit = quota.limit(project)
        wanted = getattr(need, quota.need)
        if limit is not None and wanted and getattr(used, quota.need) + wanted > limit:
            return quota
    return None


@transaction.atomic
def admit_jobs(*, project_id: int) -> list[str]:
    """Admit what fits, in order; returns the ids of the jobs admitted now."""
    project = Project.objects.select_for_update().get(pk=project_id)
    used = project_usage(project=project)
    admitted: list[str] = []
    blocked: set[str] = set()  # what the jobs ahead wait for
    position = 0
    for job in waiting_jobs(project=project):
        need = job_need(job)
        short = short_of(project, used, need)
        behind = {q.need for q in QUOTAS if getattr(need, q.need)} & blocked
        if short is None and not behind:
            used += need
            job.admitted_at = timezone.now()
            job.save(update_fields=["admitted_at", "updated_at"])
            record_state(job, JobState.QUEUED, "admitted: starting")
            admitted.append(str(job.id))
            continue
        position += 1
        if short is None:
            labels = " and ".join(q.label for q in QUOTAS if q.need in behind)
            reason = f"waiting behind earlier jobs for the project's {labels} quota"
        elif _never_fits(project, short, need):
            reason = _never_reason(project, short, need)
        else:
            blocked.add(short.need)
            reason = _waiting_reason(project, short, used, need)
        record_state(job, JobState.QUEUED, f"{reason}; position {position} in the queue")
    return admitted


def _never_fits(project: Project, quota: Quota, need: Need) -> bool:
    limit = quota.limit(project)
    return limit is not None and getattr(need, quota.need) > limit


def _waiting_reason(project: Project, quota: Quota, used: Need, need: Need) -> str:
    limit = quota.limit(project) or 0
    return (
        f"waiting: project {quota.label} quota {quota.say(limit)} {quota.unit}, "
        f"{quota.say(getattr(used, quota.need))} in use, "
        f"this job needs {quota.say(getattr(need, quota.need))}"
    )


def _never_reason(project: Project, quota: Quota, need: Need) -> str:
    limit = quota.limit(project) or 0
    return (
        f"this job needs {quota.say(getattr(need, quota.need))} {quota.unit}, more than the "
        f"project's {quota.label} quota of {quota.say(limit)}: it cannot start until an "
        "admin raises the quota"
    )
