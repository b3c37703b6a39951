"""Reads for sweeps, the compare view and adapters: a project's, one by id, a trial's loss
curve and cost (the ledger's, as the job pages show it), and a sweep's sum of them."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.http import Http404
from django.utils import timezone

from controlpanel.engine.models import Workload
from controlpanel.engine.selectors import billed_runs, workload_cost_estimate
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.sweeps.models import Adapter, Sweep, Trial, TrialState
from controlpanel.sweeps.study import Point
from training.snapshot import Snapshot


def sweeps_for_project(*, project: Project) -> QuerySet[Sweep]:
    return Sweep.objects.filter(project=project).select_related("owner").order_by("-created_at")


def _uuid(value: Any, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise Http404(f"No such {what}.") from None


def sweep_get(*, project: Project, sweep_id: Any) -> Sweep:
    """A sweep of this project, or 404 (also for malformed ids and other projects' sweeps)."""
    sweep = (
        Sweep.objects.select_related("project", "owner")
        .filter(pk=_uuid(sweep_id, "sweep"), project=project)
        .first()
    )
    if sweep is None:
        raise Http404("No such sweep.")
    return sweep


def trials_of(*, sweep: Sweep) -> list[Trial]:
    """The sweep's trials with their jobs and what the ledger bills them (no query a row)."""
    jobs = Workload.objects.select_related("flavor").prefetch_related(billed_runs())
    return list(sweep.trials.prefetch_related(Prefetch("job", queryset=jobs)).order_by("number"))


def loss_points(job: Workload) -> dict[str, float]:
    """{step: loss} of the job's current run (its stored curve, from the progress events)."""
    curve = job.loss_curve if isinstance(job.loss_curve, list) else []
    return {str(int(p[0])): float(p[1]) for p in curve if len(p) >= 2 and p[1] is not None}


def final_loss(job: Workload) -> float | None:
    """The last logged training loss of the job's current run."""
    points = loss_points(job)
    return points[max(points, key=int)] if points else None


def points(trials: Iterable[Trial]) -> list[Point]:
    """What the study knows of each trial: a running one's loss so far, from its job."""
    found = []
    for trial in trials:
        live = trial.state == TrialState.RUNNING and trial.job is not None
        values = loss_points(trial.job) if live and trial.job is not None else trial.intermediate
        found.append(
            Point(
                number=trial.number,
                params=trial.params,
                state=trial.state,
                intermediate={int(k): float(v) for k, v in (values or {}).items()},
                value=trial.final_loss,
                attrs=trial.optuna_attrs,
            )
        )
    return found


def trial_cost(trial: Trial) -> Decimal | None:
    """What the trial's job cost so far (every run), from the ledger."""
    return None if trial.job is None else workload_cost_estimate(workload=trial.job)


def sweep_cost(*, sweep: Sweep, trials: Iterable[Trial] | None = None) -> Decimal:
    """The sum of the trials' costs."""
    rows = trials_of(sweep=sweep) if trials is None else trials
    return sum((trial_cost(t) or Decimal(0) for t in rows), Decimal(0))


def best_trial(trials: Iterable[Trial]) -> Trial | None:
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.final_loss is not None]
    return min(done, key=lambda t: (t.final_loss, t.number)) if done else None


# ---- the compare view -----------------------------------------------------------------------


@dataclass(frozen=True)
class Compared:
    """One fine-tune, side by side with others."""

    job: Job
    params: dict[str, Any]
    final_loss: float | None
    tokens_per_s: float | None
    gpu_hours: float
    cost: Decimal | None
    curve: dict[str, float]
    note: str = ""


def finetunes_for_project(*, project: Project) -> QuerySet[Job]:
    """The project's fine-tunes that ran or run (what the compare view may pick)."""
    return (
        Job.objects.filter(project=project, preset="finetune")
        .exclude(started_at=None)
        .select_related("flavor")
        .order_by("-created_at")
    )


def compared(*, project: Project, job_ids: Iterable[Any]) -> list[Compared]:
    """The project's fine-tunes among `job_ids` (others' and malformed ids are left out)."""
    keys = []
    for value in job_ids:
        try:
            keys.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    jobs = Job.objects.filter(project=project, pk__in=keys, preset="finetune")
    jobs = jobs.select_related("flavor", "owner").prefetch_related(billed_runs())
    notes = dict(Trial.objects.filter(job__in=jobs).values_list("job_id", "reason"))
    return [_compared(job, notes.get(job.pk, "")) for job in jobs]


def _compared(job: Job, note: str) -> Compared:
    snapshot = Snapshot.from_json(job.progress)
    return Compared(
        job=job,
        params=dict(job.params or {}),
        final_loss=final_loss(job),
        tokens_per_s=snapshot.tokens_per_s,
        gpu_hours=_gpu_hours(job),
        cost=workload_cost_estimate(workload=job),
        curve=loss_points(job),
        note=note,
    )


def _gpu_hours(job: Job) -> float:
    """Σ of the runs' time × GPUs (a CPU flavor's units count as none)."""
    now = timezone.now()
    gpus = job.flavor.gpus_per_unit
    seconds = sum(
        ((run.finished_at or now) - run.started_at).total_seconds() * run.units * gpus
        for run in job.runs.all()
        if run.started_at is not None
    )
    return seconds / 3600


SORTS = ("final_loss", "-final_loss", "cost", "-cost", "tokens_per_s", "-tokens_per_s", "name")


def sort_compared(rows: list[Compared], sort: str) -> list[Compared]:
    """Sorted by a column of the table; rows without the value go last either way."""
    key = sort.lstrip("-")
    if sort not in SORTS:
        key, sort = "final_loss", "final_loss"
    if key == "name":
        return sorted(rows, key=lambda r: r.job.name)
    known = [r for r in rows if getattr(r, key) is not None]
    unknown = [r for r in rows if getattr(r, key) is None]
    known.sort(key=lambda r: getattr(r, key), reverse=sort.startswith("-"))
    return known + unknown


# ---- adapters -------------------------------------------------------------------------------


def adapters_for_project(*, project: Project) -> QuerySet[Adapter]:
    return Adapter.objects.filter(project=project).select_related("job").order_by("-created_at")


def adapter_get(*, project: Project, adapter_id: Any) -> Adapter:
    try:
        key = int(str(adapter_id))
    except ValueError:
        raise Http404("No such adapter.") from None
    adapter = Adapter.objects.filter(project=project, pk=key).first()
    if adapter is None:
        raise Http404("No such adapter.")
    return adapter
