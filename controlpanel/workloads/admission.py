"""The project's GPU quota, enforced at admission: first in, first out.

A job waits in QUEUED (unadmitted) while the GPUs it needs would take the project over its
quota; its reason says how many GPUs are in use and its place in the queue. CPU-only jobs use
no GPU and are admitted at once. The project row is locked while admitting, so two workers
never admit past the quota.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from controlpanel.projects.models import Project
from controlpanel.workloads.lifecycle import record_state
from controlpanel.workloads.models import ADMITTED_STATES, Job, JobState


def gpus_in_use(*, project: Project) -> int:
    total = (
        Job.objects.filter(project=project, state__in=ADMITTED_STATES)
        .exclude(admitted_at=None)
        .annotate(gpus_total=F("gpu") * F("flavor__gpus_per_unit"))
        .aggregate(total=Sum("gpus_total"))["total"]
    )
    return int(total or 0)


def waiting_jobs(*, project: Project) -> list[Job]:
    return list(
        Job.objects.filter(project=project, state=JobState.QUEUED, admitted_at=None)
        .select_related("flavor")
        .order_by("queued_at", "created_at")
    )


@transaction.atomic
def admit_jobs(*, project_id: int) -> list[str]:
    """Admit what fits, in order; returns the ids of the jobs admitted now."""
    project = Project.objects.select_for_update().get(pk=project_id)
    used = gpus_in_use(project=project)
    admitted: list[str] = []
    position = 0
    blocked = False
    for job in waiting_jobs(project=project):
        need = job.gpus
        if need == 0 or (not blocked and used + need <= project.gpu_quota):
            used += need
            job.admitted_at = timezone.now()
            job.save(update_fields=["admitted_at", "updated_at"])
            record_state(job, JobState.QUEUED, "admitted: starting")
            admitted.append(str(job.id))
            continue
        blocked = True  # strict FIFO: nothing GPU-bound overtakes the head of the queue
        position += 1
        record_state(
            job,
            JobState.QUEUED,
            f"over the project's GPU quota: waiting ({used} of {project.gpu_quota} "
            f"GPUs in use, needs {need}; position {position} in the queue)",
        )
    return admitted
