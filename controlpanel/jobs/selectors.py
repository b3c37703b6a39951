"""Reads on jobs: the filtered, sorted list of a project's, and one by id."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import F, OrderBy, QuerySet
from django.db.models.functions import Coalesce, Now

from controlpanel.engine.selectors import (
    ListFilters,
    billed_runs,
    filtered,
    list_filters_check,
    one_of,
)
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project

# Duration is NULL until a job starts: never-started jobs go last in both directions.
SORTS: dict[str, OrderBy] = {
    "created": F("created_at").asc(),
    "-created": F("created_at").desc(),
    "name": F("name").asc(),
    "-name": F("name").desc(),
    "state": F("state").asc(),
    "-state": F("state").desc(),
    "duration": F("duration").asc(nulls_last=True),
    "-duration": F("duration").desc(nulls_last=True),
    "gpus": F("gpus_total").asc(),
    "-gpus": F("gpus_total").desc(),
}


def jobs_for_project(
    *, project: Project, filters: ListFilters | None = None, whole: bool = False
) -> QuerySet[Job]:
    """The project's jobs, filtered and sorted; ValidationError (by filter name) on bad filters.
    The list page leaves the big fields unread; `whole` reads every field in the one query
    (the API shows them all: deferred, each would cost a query per job). A page's runs and
    prices are read for the page alone (engine.selectors.page_runs, mark_costs)."""
    filters, problems = list_filters_check(filters=filters or ListFilters(), states=JobState.values)
    if problems:
        raise ValidationError(problems)
    jobs = (
        Job.objects.filter(project=project)
        .select_related("project", "owner", "flavor")
        .annotate(
            gpus_total=F("gpu") * F("flavor__gpus_per_unit"),
            duration=Coalesce(F("finished_at"), Now()) - F("started_at"),
        )
    )
    if not whole:
        jobs = jobs.defer("progress", "log_cursor", "env", "params")
    return filtered(jobs, filters).order_by(
        SORTS.get(filters.sort, SORTS["-created"]), "-created_at"
    )


def job_get(*, project: Project, job_id: Any) -> Job:
    """A job of this project, or 404 (also for malformed ids and other projects' jobs)."""
    rows = Job.objects.filter(project=project).select_related("project", "owner", "flavor")
    job: Job = one_of(rows.prefetch_related(billed_runs()), job_id, "job")
    return job
