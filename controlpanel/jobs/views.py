"""Job pages and their htmx fragments: the list, the form, the detail page with its status
block (polled, answered 204 while unchanged) and its log (engine/pages.py), the actions.
Every view starts with the project access helper."""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from typing import Any, cast

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django_htmx.http import HttpResponseClientRedirect

from controlpanel.buckets.selectors import buckets_for_project
from controlpanel.core.htmx import wants_fragment
from controlpanel.dashboards.utilisation import workload_utilisation
from controlpanel.engine import selectors, workspaces
from controlpanel.engine.admission import WAITING_STATES
from controlpanel.engine.pages import action_view, log_section, log_views
from controlpanel.flavors.models import Flavor
from controlpanel.jobs import selectors as jobs
from controlpanel.jobs import services
from controlpanel.jobs.demo import demo_form_initial
from controlpanel.jobs.forms import CustomJobForm, FinetuneForm
from controlpanel.jobs.kind import KIND
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.jobs.validation import (
    LOCAL_BACKEND_NOTE,
    runs_only_the_finetune_image,
    validate_job,
)
from controlpanel.projects.access import ProjectRequest, project_view
from controlpanel.queues.positions import QueuePosition, mark_places
from training.snapshot import Snapshot

log = logging.getLogger(__name__)


PAGE_SIZE = 50


@project_view()
def job_list(request: ProjectRequest) -> HttpResponse:
    project = request.access.project
    filters, problems = selectors.list_filters_check(
        filters=selectors.ListFilters.from_query(request.GET), states=JobState.values
    )
    if problems and wants_fragment(request):
        # The fragment has no room for messages: reload the page, which shows them.
        return HttpResponseClientRedirect(request.get_full_path())
    for problem in problems.values():
        messages.error(request, problem)
    query = request.GET.copy()
    for name in problems:
        query.pop(name, None)  # pager links and polling use only the valid filters
    rows = jobs.jobs_for_project(project=project, filters=filters)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    mark_places(page)
    selectors.mark_costs(page)  # runs and prices in two reads, not a prefetch (#27)
    context = {
        "project": project,
        "kind": KIND,
        "page": page,
        "filters": filters,
        "states": JobState.values,
        "owners": project.members.order_by("username").values_list("username", flat=True),
        "live": any(job.is_live for job in page),
        "query": query.urlencode(),
    }
    template = "jobs/list.html#job-table" if wants_fragment(request) else "jobs/list.html"
    return render(request, template, context)


def _forms(request: ProjectRequest, preset: str) -> tuple[FinetuneForm, CustomJobForm]:
    data = request.POST if request.method == "POST" else None
    demo = demo_form_initial(project=request.access.project)
    finetune = FinetuneForm(data if preset == "finetune" else None, prefix="ft", initial=demo)
    custom = CustomJobForm(data if preset != "finetune" else None, prefix="c")
    return finetune, custom


def _form_context(
    request: ProjectRequest, preset: str, finetune: FinetuneForm, custom: CustomJobForm
) -> dict[str, Any]:
    project = request.access.project
    form = finetune if preset == "finetune" else custom
    flavor, units = _chosen_resources(form)
    form.describe_units(flavor)
    estimate = (
        None if not (flavor and units) else selectors.hourly_price(flavor=flavor, units=units)
    )
    return {
        "project": project,
        "kind": KIND,
        "preset": preset,
        "finetune": finetune,
        "custom": custom,
        "form": form,
        "estimate": estimate,
        "buckets": buckets_for_project(project=project),
        "flavors": Flavor.objects.filter(enabled=True),
        "backend_note": LOCAL_BACKEND_NOTE if runs_only_the_finetune_image() else "",
    }


def _chosen_resources(form: FinetuneForm | CustomJobForm) -> tuple[Flavor | None, Any]:
    """The flavor and units the form shows: what was posted, else what it starts with (its
    initial flavor, or the first one, which the select shows selected)."""
    if form.is_bound:
        return form.cleaned_data.get("flavor"), form.cleaned_data.get("gpu")
    units = form["gpu"].value()
    initial = form["flavor"].value()
    if isinstance(initial, Flavor):
        return initial, units
    flavors = cast(forms.ModelChoiceField, form.fields["flavor"]).queryset
    assert flavors is not None
    flavor = flavors.filter(name=initial).first() if initial else None
    return flavor or flavors.first(), units


@project_view()
def job_new(request: ProjectRequest) -> HttpResponse:
    access = request.access
    preset = "custom" if request.GET.get("tab", request.POST.get("tab")) == "custom" else "finetune"
    finetune, custom = _forms(request, preset)
    form = finetune if preset == "finetune" else custom
    validating = bool(request.POST.get("validate"))
    if request.method == "POST":
        valid = form.is_valid()
        try:
            if valid and not validating:
                job = services.job_submit(access=access, user=request.user, data=form.submission())
                messages.success(request, f"Job {job.name} submitted.")
                return redirect("job-detail", slug=access.project.slug, job_id=job.pk)
            # Also check what the form itself accepted, so every problem shows at once.
            validate_job(project=access.project, data=form.submission())
        except ValidationError as exc:
            form.place_errors(exc)
        if validating:
            form.forget_missing()
    context = _form_context(request, preset, finetune, custom)
    if wants_fragment(request) and validating:
        # A validation answer, errors included, is a successful response for htmx.
        return render(request, "jobs/new.html#job-form", context)
    status = 400 if form.is_bound and form.errors else 200
    return render(request, "jobs/new.html", context, status=status)


# The status block's running time, cost and utilisation move on their own: a poll shows them
# anew at least this often even when nothing else changed.
STATUS_REFRESH_S = 10


# The job's fields the status block's version covers (with its queue position and the clock).
VERSIONED = ("state", "state_reason", "state_changed_at", "run", "exit_code", "progress")


def status_version(job: Job, queue_position: QueuePosition | None) -> str:
    """What the status block shows, in 16 hex digits. Its poll carries the version the page
    holds and is answered 204 (htmx swaps nothing) while it is still this one: no template,
    no cost or utilisation lookups, one answer of a few bytes each second per open page."""
    return _version(tuple(getattr(job, name) for name in VERSIONED), queue_position)


def _version(fields: tuple[Any, ...], queue_position: QueuePosition | None) -> str:
    step = int(time.time() // STATUS_REFRESH_S)
    key = repr((*fields, queue_position, step)).encode()
    return hashlib.blake2s(key, digest_size=8).hexdigest()


def unchanged_status(request: ProjectRequest, job_id: str) -> bool:
    """Whether a status poll's `?v=` is still what the block shows, from one query of the
    versioned fields (a waiting job's queue position needs the whole path; so does any other
    case, which answers it: 404, the block)."""
    shown = request.GET.get("v")
    if not shown or not wants_fragment(request):
        return False
    try:
        key = uuid.UUID(job_id)
    except ValueError:
        return False
    found = (
        Job.objects.filter(pk=key, project=request.access.project).values_list(*VERSIONED).first()
    )
    if found is None or found[0] in WAITING_STATES:
        return False
    return shown == _version(tuple(found), None)


def _detail_context(job: Job, queue_position: QueuePosition | None) -> dict[str, Any]:
    return {
        "job": job,
        "project": job.project,
        "progress": Snapshot.from_json(job.progress),
        "events": job.events.order_by("at", "pk"),
        "cost": selectors.job_cost_estimate(job=job),
        "hourly": selectors.hourly_price(flavor=job.flavor, units=job.gpu),
        "queue_position": queue_position,
        "reason": selectors.reason_shown(job=job, position=queue_position),
        "status_version": status_version(job, queue_position),
        "utilisation": workload_utilisation(job) if job.flavor.is_gpu else None,
        "workspace_until": workspaces.kept_until(job),
    }


@project_view()
def job_detail(request: ProjectRequest, job_id: str) -> HttpResponse:
    job = jobs.job_get(project=request.access.project, job_id=job_id)
    position = selectors.queue_place(job=job)
    context = _detail_context(job, position) | log_section(job)
    return render(request, "jobs/detail.html", context)


@project_view()
def job_status(request: ProjectRequest, job_id: str) -> HttpResponse:
    """The status block (htmx, every second while the job is live); 204 while `?v=` is what
    it would show (status_version)."""
    if unchanged_status(request, job_id):
        return HttpResponse(status=204)
    job = jobs.job_get(project=request.access.project, job_id=job_id)
    position = selectors.queue_place(job=job)
    if request.GET.get("v") == status_version(job, position):
        return HttpResponse(status=204)
    return render(request, "jobs/detail.html#job-status", _detail_context(job, position))


def _get(request: ProjectRequest, job_id: str) -> Job:
    return jobs.job_get(project=request.access.project, job_id=job_id)


job_logs, job_log_download = log_views("job", _get)


ACTIONS = {
    "stop": (services.job_stop, "Stop requested."),
    "rerun": (services.job_rerun, "Queued again."),
    "retry-push": (services.job_retry_push, "Retrying the push."),
    "delete": (services.job_delete, "Job deleted."),
}


job_action = action_view("job", _get, ACTIONS)
