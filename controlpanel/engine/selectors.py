"""Reads on jobs and notebooks: the filtered lists, one by id within a project, cost estimates."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeVar, cast

from django.core.exceptions import ValidationError
from django.db.models import F, OrderBy, Prefetch, QuerySet
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Coalesce, Now
from django.http import Http404
from django.utils import timezone

from controlpanel.billing.rules import billed_minutes, segments
from controlpanel.billing.usage import is_estimated, runs_cost, runs_with_billing
from controlpanel.engine.models import Job, JobState, Notebook, NotebookImage, Workload
from controlpanel.engine.validation import LABEL_RE
from controlpanel.flavors.models import Flavor
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
_Jobs = TypeVar("_Jobs", bound=QuerySet[Any])
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

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> JobFilters:
        """The filters of a query string, read the same way by the page and the API."""
        return cls(
            state=query.get("state", ""),
            owner=query.get("owner", ""),
            label=query.get("label", ""),
            q=query.get("q", "")[:100],
            sort=query.get("sort", "") or "-created",
        )


def job_filters_check(*, filters: JobFilters) -> tuple[JobFilters, dict[str, str]]:
    """The filters normalised (state upper-cased) with the bad ones blanked, and what was wrong
    with each bad one (by filter name)."""
    problems: dict[str, str] = {}
    job_state = filters.state.strip().upper()
    if job_state and job_state not in JobState.values:
        problems["state"] = (
            f"Unknown state {filters.state!r}: choose one of {', '.join(JobState.values)}."
        )
    if filters.label and not _label_filter_ok(filters.label):
        problems["label"] = (
            f"Bad label filter {filters.label!r}: give key or key=value; keys and values are up "
            "to 63 letters, digits, - _ . starting and ending with a letter or digit."
        )
    cleaned = replace(
        filters,
        state="" if "state" in problems else job_state,
        label="" if "label" in problems else filters.label,
    )
    return cleaned, problems


def _label_filter_ok(label: str) -> bool:
    key, _, value = label.partition("=")
    return bool(key) and bool(LABEL_RE.fullmatch(key)) and bool(LABEL_RE.fullmatch(value))


def jobs_for_project(
    *, project: Project, filters: JobFilters = JobFilters(), whole: bool = False
) -> QuerySet[Job]:
    """The project's jobs, filtered and sorted; ValidationError (by filter name) on bad filters.
    The list page leaves the big fields unread; `whole` reads every field in the one query
    (the API shows them all: deferred, each would cost a query per job)."""
    filters, problems = job_filters_check(filters=filters)
    if problems:
        raise ValidationError(problems)
    jobs = (
        Job.objects.filter(project=project)
        .select_related("project", "owner", "flavor")
        .prefetch_related("flavor__prices", billed_runs())
        .annotate(
            gpus_total=F("gpu") * F("flavor__gpus_per_unit"),
            duration=Coalesce(F("finished_at"), Now()) - F("started_at"),
        )
    )
    if not whole:
        jobs = jobs.defer("progress", "loss_curve", "log_cursor", "env", "params")
    if filters.state:
        jobs = jobs.filter(state=filters.state)
    if filters.owner:
        jobs = jobs.filter(owner__username=filters.owner)
    if filters.label:
        jobs = _with_label(jobs, filters.label)
    if filters.q:
        jobs = jobs.filter(name__icontains=filters.q)
    return jobs.order_by(SORTS.get(filters.sort, SORTS["-created"]), "-created_at")


def _with_label(jobs: _Jobs, label: str) -> _Jobs:
    """`key` or `key=value`, on PostgreSQL and SQLite alike (SQLite has no JSON `contains`).

    Never build a lookup from user text: `labels__<key>` would let `a__regex` through, so the
    key is an expression's argument (a quoted JSON path), not part of a lookup name. The value
    is compared as a JSON string: KeyTextTransform's `exact` on SQLite parses it as JSON."""
    key, sep, value = label.partition("=")
    if not sep:
        return jobs.filter(labels__has_key=key)
    return cast(
        _Jobs, jobs.alias(label_value=KeyTransform(key, "labels")).filter(label_value=value)
    )


def job_get(*, project: Project, job_id: Any) -> Job:
    """A job of this project, or 404 (also for malformed ids and other projects' jobs)."""
    try:
        key = uuid.UUID(str(job_id))
    except ValueError:
        raise Http404("No such job.") from None
    job = (
        Job.objects.select_related("project", "owner", "flavor")
        .prefetch_related(billed_runs())
        .filter(pk=key, project=project)
        .first()
    )
    if job is None:
        raise Http404("No such job.")
    return job


def billed_runs() -> Prefetch[Any]:
    """A workload's runs with what the ledger bills each (one query for a whole list)."""
    return Prefetch("runs", queryset=runs_with_billing())


def hourly_price(*, flavor: Flavor, units: int) -> Decimal | None:
    price = flavor.current_price
    return None if price is None else (price * units).quantize(CENT, ROUND_HALF_UP)


def job_cost_estimate(*, job: Workload) -> Decimal | None:
    """The current run's cost so far: its billing ledger, plus what it ran since its last
    recording while it runs (billing/usage.py). Before the run's row exists (a start not
    observed yet), the billing rule applied to the job's own times."""
    cost = runs_cost([run for run in job.runs.all() if run.run == job.run])
    if cost is not None:
        return cost.amount
    return _run_cost(job.flavor, job.gpu, job.started_at, job.finished_at)


def workload_cost_estimate(*, workload: Workload) -> Decimal | None:
    """What every run of the workload cost so far (a notebook is billed per start), from the
    ledger as `job_cost_estimate`; None while no run has started. Reads
    `workload.runs.all()`, so a list prefetching `billed_runs()` adds no query a row."""
    cost = runs_cost(workload.runs.all())
    return None if cost is None else cost.amount


def workload_cost_estimated(*, workload: Workload, current: bool = False) -> bool:
    """Whether the cost includes a run closed at its last sighting (its pod vanished)."""
    return any(
        is_estimated(run) for run in workload.runs.all() if not current or run.run == workload.run
    )


def _run_cost(
    flavor: Flavor, units: int, start: datetime | None, end: datetime | None
) -> Decimal | None:
    """The billing rule (billing.rules) applied to one run, up to now while it runs."""
    if start is None or flavor.price_at(start) is None:
        return None
    minutes = billed_minutes(start, end or timezone.now())
    shares = segments(
        start, minutes, [(p.valid_from, p.price_per_hour) for p in flavor.prices.all()]
    )
    per_hour = sum(((seg.price or Decimal(0)) * seg.minutes for seg in shares), Decimal(0))
    return (per_hour * units / 60).quantize(MILLI_CENT, ROUND_HALF_UP)


def queue_position(*, job: Workload) -> int | None:
    """The workload's place among the waiting ones (jobs and notebook starts): of its project,
    or of every project where they share one machine (the local backend), as admission counts
    it."""
    from controlpanel.engine.admission import WAITING_STATES, shares_machine

    if job.state not in WAITING_STATES or job.admitted_at is not None:
        return None
    ahead = Workload.objects.filter(
        state__in=WAITING_STATES, admitted_at=None, queued_at__lt=job.queued_at
    )
    if not shares_machine():
        ahead = ahead.filter(project=job.project_id)
    return ahead.count() + 1


def notebooks_for_project(*, project: Project) -> QuerySet[Notebook]:
    """The project's notebooks, newest first, with what the list shows (flavor prices and
    runs for the cost so far) read in a fixed number of queries."""
    return (
        Notebook.objects.filter(project=project)
        .select_related("project", "owner", "flavor")
        .prefetch_related("flavor__prices", billed_runs())
        .defer("progress", "loss_curve", "log_cursor", "env")
        .order_by("-created_at")
    )


def notebook_get(*, project: Project, notebook_id: Any) -> Notebook:
    """A notebook of this project, or 404 (also for malformed ids and other projects' ones)."""
    try:
        key = uuid.UUID(str(notebook_id))
    except ValueError:
        raise Http404("No such notebook.") from None
    notebook = (
        Notebook.objects.select_related("project", "owner", "flavor")
        .prefetch_related("flavor__prices", billed_runs())
        .filter(pk=key, project=project)
        .first()
    )
    if notebook is None:
        raise Http404("No such notebook.")
    return notebook


def notebook_images() -> dict[str, NotebookImage]:
    """The images notebooks may run, by name, in the admin's order."""
    return {image.name: image for image in NotebookImage.objects.filter(enabled=True)}
