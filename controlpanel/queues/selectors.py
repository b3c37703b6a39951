"""What Kueue is told, read from the panel's rows (QUEUE_ENGINE=kueue)."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Sum

from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.queues.models import ProjectQueue
from deploy.manifests import kueue
from deploy.types import FlavorSpec


def kueue_on() -> bool:
    """Whether Kueue is the queue (else the panel's own admission, `builtin`)."""
    return bool(settings.QUEUE_ENGINE == "kueue")


def project_queue(project: Project) -> ProjectQueue:
    """The project's sharing settings (Kueue's defaults where it has no row; not saved)."""
    try:
        return project.queue
    except ProjectQueue.DoesNotExist:
        return ProjectQueue(project=project)


def queue_request(project: Project, *, install: str = "") -> kueue.QueueRequest:
    settings_row = project_queue(project)
    return kueue.QueueRequest(
        slug=project.slug,
        namespace=project.namespace,
        gpu_quota=project.gpu_quota,
        cpu_quota=project.cpu_quota,
        memory_gib_quota=project.memory_gib_quota,
        borrowing_limit=settings_row.borrowing_limit,
        lending_limit=settings_row.lending_limit,
        weight=settings_row.fair_sharing_weight,
        install=install,
    )


def queue_flavors() -> list[FlavorSpec]:
    return [flavor.to_spec() for flavor in Flavor.objects.filter(enabled=True)]


def namespace_gpu_quota(project: Project) -> int:
    """The GPUs the namespace's ResourceQuota allows: the project's quota with the builtin
    engine; with Kueue, that plus what it may borrow (the cohort's other quotas when its
    borrowing has no limit), so the cluster's own guarantee never refuses what Kueue admitted."""
    if not kueue_on():
        return project.gpu_quota
    limit = project_queue(project).borrowing_limit
    if limit is not None:
        return project.gpu_quota + limit
    total = Project.objects.aggregate(total=Sum("gpu_quota"))["total"] or 0
    return max(int(total), project.gpu_quota)


def namespace_cpu_memory_quotas(project: Project) -> tuple[int, int]:
    """The CPU cores and memory GiB the namespace's ResourceQuota allows (0: no line). With the
    builtin engine, the project's quotas. With Kueue, its ClusterQueue lends and borrows CPU
    and memory in the cohort without a limit, so the ceiling is the cohort's whole (no line
    when a project has none): the namespace's quota must never refuse a pod Kueue admitted on
    borrowed capacity, as it would a borrowed GPU's own CPU and memory."""
    if not kueue_on():
        return project.cpu_quota, project.memory_gib_quota
    rows = list(Project.objects.values_list("cpu_quota", "memory_gib_quota"))
    cpu = 0 if any(c == 0 for c, _ in rows) else sum(c for c, _ in rows)
    memory = 0 if any(m == 0 for _, m in rows) else sum(m for _, m in rows)
    return max(cpu, project.cpu_quota) if cpu else 0, max(
        memory, project.memory_gib_quota
    ) if memory else 0


def priority_tier(*, interactive: bool, preemptible: bool) -> str:
    if interactive:
        return "interactive"
    return "preemptible" if preemptible else "batch"


def job_queue(*, project: Project, preemptible: bool) -> tuple[str | None, str | None, bool]:
    """A job's queue name, priority class and whether it is preemptible: with Kueue, the
    project's LocalQueue at the preemptible priority when the job asked (the fine-tune's
    default: it checkpoints on SIGTERM and resumes), else batch; with the builtin engine, only
    the queue-name an operator set on the project by hand, and nothing is preempted."""
    if not kueue_on():
        return project.kueue_queue or None, None, False
    tier = priority_tier(interactive=False, preemptible=preemptible)
    return kueue.LOCAL_QUEUE, kueue.priority_class_name(tier), preemptible


def interactive_queue(*, project: Project) -> tuple[str | None, str | None]:
    """A notebook's or app's queue name and priority class: with Kueue, the project's
    LocalQueue at the interactive priority (people wait on it); with the builtin engine, none
    (the namespace's quota holds them as before)."""
    if not kueue_on():
        return None, None
    return kueue.LOCAL_QUEUE, kueue.priority_class_name("interactive")
