"""The project's quotas, enforced at admission: first in, first out.

A job waits in QUEUED (unadmitted) while what it needs would take the project over one of its
quotas: GPUs, CPU, memory, pods (one per running job) or workspace storage (a run with rw
volumes holds a claim from admission until it ends cleanly; after SYNC_FAILED or ERROR the claim
is kept, and still counts). Its reason names the quota, what is in use and what the job needs,
and its place in the queue. A job needing none of what the jobs ahead wait for may pass them (a
CPU-only job behind one waiting for GPUs); nothing else overtakes. The amounts are the pod's own
requests, the push sidecar's included, as the namespace's ResourceQuota counts them. The
project row is locked while admitting, so two workers never admit past a quota; the lock is
PostgreSQL's FOR NO KEY UPDATE, which leaves inserting rows that reference the project free:
a submit never waits for an admission pass (FOR UPDATE made every submit of a burst queue
behind the pass admitting the previous ones).

On a backend that is one machine (local: `capacity()` answers its cores and memory) every
project's jobs also share that machine: a job is admitted only while its flavor's vCPU and
memory × units fit beside the admitted ones, in one queue across projects, first in first out
(a job bigger than the machine says it never starts, and blocks nobody). One advisory lock
(PostgreSQL) serialises these admissions; SQLite's IMMEDIATE transactions already do.

A project whose monthly budget is reached holds all its new launches, with the budget as the
reason ("Budget of 500.00 EUR for December 2025 reached ..."), and blocks no other project;
raising the budget admits the project again, and the sweep's admission pass of every waiting
project releases them when the month changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlpanel.billing.budgets import hold_reason
from controlpanel.engine.backend import get_backend, job_ref
from controlpanel.engine.lifecycle import record_state
from controlpanel.engine.models import LIVE_STATES, Workload
from controlpanel.engine.registry import kind_of, states_of
from controlpanel.projects.models import Project
from controlpanel.queues.selectors import kueue_on
from deploy.types import Capacity
from storage.volumes import Mode

# The push sidecar's requests (deploy/manifests/common.py, `sync_container`): it runs beside
# the user's container, so the pod asks for both.
SIDECAR_MILLICPU = 250
SIDECAR_MEMORY_MIB = 512
# Final states that keep a run's workspace claim (a push to retry, or data to rescue), of
# the kinds whose runs claim one (registry.py); their clean ends release it.
CLAIM_KEPT_STATES = states_of(lambda kind: kind.claim_kept)


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


# Where a workload waits for admission (admitted_at None): its kind's (a job in QUEUED, a
# notebook's start in STARTING).
WAITING_STATES = states_of(lambda kind: kind.waiting)


def job_need(job: Workload, *, claim: bool = True) -> Need:
    """The pod's requests of one run, and its workspace claim when it has rw volumes."""
    pushes = any(v.mode in (Mode.RW, Mode.RWD) for v in job.volume_specs)
    run_claim = kind_of(job).run_claim
    flavor, units, nodes = job.flavor, job.gpu, job.nodes  # a gang: every node at once
    return Need(
        gpus=flavor.gpus_per_unit * units * nodes,
        millicpu=(flavor.vcpu_per_unit * units * 1000 + (SIDECAR_MILLICPU if pushes else 0))
        * nodes,
        memory_mib=(
            flavor.memory_gib_per_unit * units * 1024 + (SIDECAR_MEMORY_MIB if pushes else 0)
        )
        * nodes,
        pods=nodes,
        # A job's per-run workspace claim; a notebook's lives as long as the notebook.
        storage_gib=settings.JOB_WORKSPACE_GIB if pushes and claim and run_claim else 0,
    )


def project_usage(*, project: Project) -> Need:
    """What the admitted, unfinished runs take, plus the claims that finished runs keep."""
    total = Need()
    # LIVE, not only ADMITTED_STATES: a job admitted a moment ago is still QUEUED (with its
    # admitted_at) until its first reconcile, and holds its share already.
    running = Workload.objects.filter(project=project, state__in=LIVE_STATES)
    for job in running.exclude(admitted_at=None).select_related("flavor"):
        total += job_need(job)
    kept = Workload.objects.filter(
        project=project, state__in=CLAIM_KEPT_STATES, workspace_deleted_at=None
    )
    for job in kept.exclude(admitted_at=None).select_related("flavor"):
        total += Need(storage_gib=job_need(job).storage_gib)
    return total


def release_workspace(*, job: Workload) -> None:
    """A run that ended cleanly has nothing left to push: its workspace claim goes, and the
    storage quota it held with it."""
    has_claim = job_need(job).storage_gib > 0
    if has_claim and job.state in kind_of(job).claim_released and job.launched_run >= job.run:
        get_backend().release_workspace(ref=job_ref(job))


def waiting_jobs(*, project: Project) -> list[Workload]:
    return list(
        Workload.objects.filter(project=project, state__in=WAITING_STATES, admitted_at=None)
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


# The machine's resources: (Need field, label, how an amount is said, scale).
MACHINE = (
    ("millicpu", "vCPU", "{} vCPU", 1000),
    ("memory_mib", "memory", "{} GiB of memory", 1024),
)
# One admission at a time on the machine: the bytes "ajmachin" as a signed 64-bit integer.
MACHINE_LOCK_KEY = int.from_bytes(b"ajmachin", "big", signed=True)
OVERRIDE_HINT = "AJUSTE_LOCAL_CPUS and AJUSTE_LOCAL_MEMORY_GIB set what the local backend may use"


def machine_need(job: Workload) -> Need:
    """What a run takes of the machine: its flavor's vCPU and memory × units. No sidecar here:
    the local backend pushes the volumes after the user's process, not beside it."""
    flavor, units = job.flavor, job.gpu
    return Need(
        millicpu=flavor.vcpu_per_unit * units * 1000,
        memory_mib=flavor.memory_gib_per_unit * units * 1024,
    )


@dataclass(frozen=True)
class Holder:
    """An admitted, unfinished run on the machine: what it is, and what it takes."""

    kind: str
    name: str
    project_id: int
    project: str
    need: Need

    @classmethod
    def of(cls, job: Workload) -> Holder:
        return cls(job.kind, job.name, job.project_id, job.project.slug, machine_need(job))

    def said(self, project_id: int, name: str, scale: int) -> str:
        """ "notebook lab (1)", with "of project <slug>" when it is another project's."""
        whose = "" if self.project_id == project_id else f" of project {self.project}"
        return f"{self.kind} {self.name}{whose} ({getattr(self.need, name) / scale:g})"


def machine_holders() -> list[Holder]:
    """The admitted, unfinished runs of every project, oldest first."""
    running = Workload.objects.filter(state__in=LIVE_STATES).exclude(admitted_at=None)
    found = running.select_related("flavor", "project").order_by("admitted_at", "pk")
    return [Holder.of(job) for job in found]


def machine_usage() -> Need:
    """What the admitted, unfinished runs of every project take of the machine."""
    return sum((holder.need for holder in machine_holders()), Need())


def machine_waiting_jobs() -> list[Workload]:
    """Every project's waiting jobs, first in first out: one machine, one queue."""
    waiting = Workload.objects.filter(state__in=WAITING_STATES, admitted_at=None)
    return list(waiting.select_related("flavor").order_by("queued_at", "created_at"))


def shares_machine() -> bool:
    """Whether every project's jobs wait in one queue (the backend is one machine). From the
    settings, not the backend: the web process (queue positions) never builds a backend."""
    return settings.COMPUTE_BACKEND == "local"


def _lock_machine() -> None:
    """Serialise admissions until the transaction ends, so two workers never admit past the
    machine. SQLite (`make run`) needs none: its transactions begin IMMEDIATE, one writer at
    a time."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [MACHINE_LOCK_KEY])


@dataclass
class MachineQueue:
    """The machine all projects share during one admission pass: its capacity, what the
    admitted runs take, and what the jobs ahead wait for (nothing overtakes them)."""

    capacity: Capacity
    holders: list[Holder]
    blocked: list[str] = field(default_factory=list)

    @property
    def used(self) -> Need:
        return sum((holder.need for holder in self.holders), Need())

    def wait_reason(self, job: Workload) -> str | None:
        """Why this job waits for the machine (None: it starts now)."""
        need = machine_need(job)
        for name, _label, amount, scale in MACHINE:
            has, wanted = getattr(self.capacity, name), getattr(need, name)
            if wanted > has:  # blocks nobody: it will never be at the head
                return (
                    f"this job needs {amount.format(f'{wanted / scale:g}')}, more than this "
                    f"machine's {has / scale:g}: it can never start here ({OVERRIDE_HINT})"
                )
        if self.blocked:
            return f"waiting behind earlier jobs for this machine's {' and '.join(self.blocked)}"
        for name, label, amount, scale in MACHINE:
            has, wanted = getattr(self.capacity, name), getattr(need, name)
            in_use = getattr(self.used, name)
            if in_use + wanted > has:
                self.blocked.append(label)
                holding = [h for h in self.holders if getattr(h.need, name)]
                by = ", ".join(h.said(job.project_id, name, scale) for h in holding)
                return (
                    f"waiting: this machine has {amount.format(f'{has / scale:g}')}, "
                    f"{in_use / scale:g} in use by {by}; this job needs {wanted / scale:g}"
                )
        return None


@transaction.atomic
def admit_jobs(*, project_id: int) -> list[str]:
    """Admit what fits, in order; returns the ids of the jobs admitted now.

    On a backend that is one machine (local) all projects share one queue: whichever
    project's job arrived or ended, the waiting jobs of every project are admitted in order.
    """
    capacity = get_backend().capacity()
    if capacity is None:
        project = Project.objects.select_for_update(no_key=True).get(pk=project_id)
        return _admit(waiting_jobs(project=project), {project.pk: project}, None)
    _lock_machine()
    waiting = machine_waiting_jobs()
    locked = Project.objects.select_for_update(no_key=True).filter(
        pk__in={j.project_id for j in waiting}
    )
    projects = {project.pk: project for project in locked.order_by("pk")}
    return _admit(waiting, projects, MachineQueue(capacity=capacity, holders=machine_holders()))


def _admit(
    jobs: list[Workload], projects: dict[int, Project], machine: MachineQueue | None
) -> list[str]:
    used = {pk: project_usage(project=project) for pk, project in projects.items()}
    # A project whose month's budget is reached holds every new launch (billing/budgets.py).
    held = {pk: hold_reason(project=project) for pk, project in projects.items()}
    blocked: dict[int, set[str]] = {pk: set() for pk in projects}  # what the jobs ahead wait for
    admitted: list[str] = []
    position = 0
    for job in jobs:
        pk, need = job.project_id, job_need(job)
        # With Kueue the project's quotas are its ClusterQueue's: the job goes straight to it
        # (one queue, not two); the budget hold stays here (Kueue knows no money).
        quota_wait = (
            None if kueue_on() else _project_wait(projects[pk], used[pk], need, blocked[pk])
        )
        reason = held[pk] or quota_wait
        if reason is None and machine is not None:
            reason = machine.wait_reason(job)
        if reason is None:
            used[pk] += need
            if machine is not None:
                machine.holders.append(Holder.of(job))
            job.admitted_at = timezone.now()
            job.save(update_fields=["admitted_at", "updated_at"])
            record_state(job, kind_of(job).waiting, "admitted: starting")
            admitted.append(str(job.id))
            continue
        position += 1
        record_state(job, kind_of(job).waiting, f"{reason}; position {position} in the queue")
    return admitted


def _project_wait(project: Project, used: Need, need: Need, blocked: set[str]) -> str | None:
    """Why the job waits for its project's quotas (None: they let it start)."""
    short = short_of(project, used, need)
    behind = {q.need for q in QUOTAS if getattr(need, q.need)} & blocked
    if short is None and not behind:
        return None
    if short is None:
        labels = " and ".join(q.label for q in QUOTAS if q.need in behind)
        return f"waiting behind earlier jobs for the project's {labels} quota"
    if _never_fits(project, short, need):
        return _never_reason(project, short, need)
    blocked.add(short.need)
    return _waiting_reason(project, short, used, need)


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
