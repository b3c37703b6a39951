"""Reads on jobs: the filtered list, one job by id within a project, cost estimates."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import F, QuerySet
from django.db.models.functions import Coalesce, Now
from django.http import Http404
from django.utils import timezone

from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.workloads.models import Job, JobState

SORTS = {
    "created": "created_at",
    "-created": "-created_at",
    "name": "name",
    "-name": "-name",
    "state": "state",
    "-state": "-state",
    "duration": "duration",
    "-duration": "-duration",
    "gpus": "gpus_total",
    "-gpus": "-gpus_total",
}
CENT = Decimal("0.01")
MILLI_CENT = Decimal("0.0001")  # a CPU minute costs fractions of a cent


@dataclass(frozen=True)
class JobFilters:
    """What the job list is narrowed to (all optional)."""

    state: str = ""
    owner: str = ""
    label: str = ""
    q: str = ""
    sort: str = "-created"


def jobs_for_project(*, project: Project, filters: JobFilters = JobFilters()) -> QuerySet[Job]:
    jobs = (
        Job.objects.filter(project=project)
        .select_related("owner", "flavor")
        .prefetch_related("flavor__prices")
        .annotate(
            gpus_total=F("gpu") * F("flavor__gpus_per_unit"),
            duration=Coalesce(F("finished_at"), Now()) - F("started_at"),
        )
        .defer("progress", "loss_curve", "log_cursor", "env", "params")
    )
    if filters.state in JobState.values:
        jobs = jobs.filter(state=filters.state)
    if filters.owner:
        jobs = jobs.filter(owner__username=filters.owner)
    if filters.label:
        key, _, value = filters.label.partition("=")
        jobs = jobs.filter(**({f"labels__{key}": value} if value else {"labels__has_key": key}))
    if filters.q:
        jobs = jobs.filter(name__icontains=filters.q)
    return jobs.order_by(SORTS.get(filters.sort, "-created_at"), "-created_at")


def job_get(*, project: Project, job_id: Any) -> Job:
    """A job of this project, or 404 (also for malformed ids and other projects' jobs)."""
    try:
        key = uuid.UUID(str(job_id))
    except ValueError:
        raise Http404("No such job.") from None
    job = (
        Job.objects.select_related("project", "owner", "flavor")
        .filter(pk=key, project=project)
        .first()
    )
    if job is None:
        raise Http404("No such job.")
    return job


def hourly_price(*, flavor: Flavor, units: int) -> Decimal | None:
    price = flavor.current_price
    return None if price is None else (price * units).quantize(CENT, ROUND_HALF_UP)


def job_cost_estimate(*, job: Job) -> Decimal | None:
    """RUNNING time so far, each started minute in full, at the price when it started.

    An estimate for the job page; the billing ledger is the reference."""
    if job.started_at is None:
        return None
    price = job.flavor.price_at(job.started_at)
    if price is None:
        return None
    end = job.finished_at or timezone.now()
    minutes = max(1, math.ceil((end - job.started_at).total_seconds() / 60))
    return (price * job.gpu * minutes / 60).quantize(MILLI_CENT, ROUND_HALF_UP)


def queue_position(*, job: Job) -> int | None:
    if job.state != JobState.QUEUED or job.admitted_at is not None:
        return None
    ahead = Job.objects.filter(
        project=job.project_id, state=JobState.QUEUED, admitted_at=None, queued_at__lt=job.queued_at
    ).count()
    return ahead + 1
