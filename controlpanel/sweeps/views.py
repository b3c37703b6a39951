"""Pages: sweeps (list, new, detail, stop), the compare view (curves, table, CSV, "deploy the
best") and the adapters list (lineage, which keys changed between two)."""

from __future__ import annotations

import csv
import json
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlpanel.jobs.demo import demo_form_initial
from controlpanel.projects.access import ProjectRequest, project_view
from controlpanel.sweeps import adapters, selectors, services
from controlpanel.sweeps.forms import SweepForm
from controlpanel.sweeps.models import Sweep
from controlpanel.sweeps.validation import validate_sweep


@project_view()
def sweep_list(request: ProjectRequest) -> HttpResponse:
    project = request.access.project
    sweeps = list(selectors.sweeps_for_project(project=project)[:200])
    return render(request, "sweeps/list.html", {"project": project, "sweeps": sweeps})


@project_view()
def sweep_new(request: ProjectRequest) -> HttpResponse:
    access = request.access
    initial = demo_form_initial(project=access.project)
    initial |= {"space": "learning_rate = 1e-5, 1e-4, 1e-3\nrank = 8, 16", "name": "sweep"}
    form = SweepForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            sweep = services.sweep_create(access=access, user=request.user, data=form.sweep_data())
        except ValidationError as exc:
            form.place_errors(exc)
        else:
            messages.success(request, f"Sweep {sweep.name} started.")
            return redirect("sweep-detail", slug=access.project.slug, sweep_id=sweep.pk)
    elif request.method == "POST" and form.errors:
        _check_the_rest(access.project, form)
    status = 400 if form.is_bound and form.errors else 200
    context = {"project": access.project, "form": form}
    return render(request, "sweeps/new.html", context, status=status)


def _check_the_rest(project: Any, form: SweepForm) -> None:
    """With the form's own errors, what the contract says of what was typed: every problem
    at once."""
    try:
        validate_sweep(project=project, data=form.sweep_data())
    except (ValidationError, KeyError, AttributeError, ValueError) as exc:
        if isinstance(exc, ValidationError):
            form.place_errors(exc)


@project_view()
def sweep_detail(request: ProjectRequest, sweep_id: str) -> HttpResponse:
    sweep = selectors.sweep_get(project=request.access.project, sweep_id=sweep_id)
    trials = selectors.trials_of(sweep=sweep)
    rows = [(t, selectors.trial_cost(t)) for t in trials]
    context = {
        "project": sweep.project,
        "sweep": sweep,
        "rows": rows,
        "best": selectors.best_trial(trials),
        "cost": selectors.sweep_cost(sweep=sweep, trials=trials),
        "space": json.dumps(sweep.space),
    }
    return render(request, "sweeps/detail.html", context)


@require_POST
@project_view()
def sweep_stop(request: ProjectRequest, sweep_id: str) -> HttpResponse:
    sweep = selectors.sweep_get(project=request.access.project, sweep_id=sweep_id)
    try:
        services.sweep_stop(access=request.access, user=request.user, sweep=sweep)
        messages.success(request, f"Sweep {sweep.name} stopped.")
    except (ValidationError, PermissionDenied) as exc:
        messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
    return redirect("sweep-detail", slug=sweep.project.slug, sweep_id=sweep.pk)


# ---- compare --------------------------------------------------------------------------------


def _picked(request: ProjectRequest) -> tuple[Sweep | None, list[str]]:
    """The jobs to compare: `?job=` ones, else the trials of `?sweep=`."""
    project = request.access.project
    sweep = None
    if request.GET.get("sweep"):
        sweep = selectors.sweep_get(project=project, sweep_id=request.GET["sweep"])
    jobs = request.GET.getlist("job")
    if not jobs and sweep is not None:
        jobs = [str(t.job_id) for t in sweep.trials.exclude(job=None)]
    return sweep, jobs


def _compare_rows(request: ProjectRequest) -> tuple[Sweep | None, list[Any], str]:
    sweep, jobs = _picked(request)
    sort = request.GET.get("sort") or "final_loss"
    rows = selectors.compared(project=request.access.project, job_ids=jobs)
    return sweep, selectors.sort_compared(rows, sort), sort


def _chart(rows: list[selectors.Compared]) -> str:
    """Every run's loss by step, on the union of their steps (charts.js's series shape)."""
    steps = sorted({int(s) for r in rows for s in r.curve})
    series = [{"name": r.job.name, "data": [r.curve.get(str(s)) for s in steps]} for r in rows]
    return json.dumps({"labels": steps, "series": series, "unit": "loss"})


@project_view()
def compare(request: ProjectRequest) -> HttpResponse:
    sweep, rows, sort = _compare_rows(request)
    project = request.access.project
    params = sorted({k for r in rows for k in r.params if k != "base_model"})
    best = next((r for r in rows if r.final_loss is not None and r.job.state == "DONE"), None)
    if sort != "final_loss":
        done = [r for r in rows if r.final_loss is not None and r.job.state == "DONE"]
        best = min(done, key=lambda r: r.final_loss or 0) if done else None
    query = request.GET.copy()
    query.pop("sort", None)
    context = {
        "project": project,
        "sweep": sweep,
        "rows": rows,
        "params": params,
        "sort": sort,
        "chart": _chart(rows),
        "best": best,
        "query": query.urlencode(),
        "choices": selectors.finetunes_for_project(project=project)[:100],
        "picked": {str(r.job.pk) for r in rows},
    }
    return render(request, "sweeps/compare.html", context)


@project_view()
def compare_csv(request: ProjectRequest) -> HttpResponse:
    _, rows, _ = _compare_rows(request)
    params = sorted({k for r in rows for k in r.params})
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="compare.csv"'
    out = csv.writer(response)
    out.writerow(
        ["job", "name", "state", *params, "final_loss", "tokens_per_s", "gpu_hours", "cost"]
    )
    for r in rows:
        values = [r.params.get(p, "") for p in params]
        out.writerow(
            [
                r.job.pk,
                _cell(r.job.name),
                r.job.state,
                *map(_cell, values),
                r.final_loss,
                r.tokens_per_s,
                f"{r.gpu_hours:.4f}",
                r.cost,
            ]
        )
    return response


def _cell(value: Any) -> Any:
    """No spreadsheet formula out of a user's text (=, +, -, @ start one)."""
    text = str(value)
    return f"'{text}" if text[:1] in ("=", "+", "-", "@") and isinstance(value, str) else value


# ---- adapters -------------------------------------------------------------------------------


@project_view()
def adapter_list(request: ProjectRequest) -> HttpResponse:
    project = request.access.project
    adapters_ = list(selectors.adapters_for_project(project=project)[:200])
    diff = None
    if request.GET.get("a") and request.GET.get("b"):
        before = selectors.adapter_get(project=project, adapter_id=request.GET["a"])
        after = selectors.adapter_get(project=project, adapter_id=request.GET["b"])
        diff = {
            "before": before,
            "after": after,
            "changes": adapters.lineage_changes(before=before, after=after),
        }
    context = {"project": project, "adapters": adapters_, "diff": diff}
    return render(request, "sweeps/adapters.html", context)
