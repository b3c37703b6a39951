"""Job pages and their htmx fragments. Every view starts with the project access helper.

They read rows only: the watcher, the sweep and the tasks talk to the cluster (a GET never
does), so a page costs the same whether one person watches a job or fifty."""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from typing import Any, cast

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from controlpanel.api.pagination import MAX_OFFSET
from controlpanel.buckets.selectors import buckets_for_project
from controlpanel.core.htmx import wants_fragment
from controlpanel.dashboards.utilisation import workload_utilisation
from controlpanel.engine import logs, selectors, services
from controlpanel.engine.admission import WAITING_STATES
from controlpanel.engine.collector import note_followed
from controlpanel.engine.demo import demo_form_initial
from controlpanel.engine.forms import CustomJobForm, FinetuneForm
from controlpanel.engine.logpage import LogPage, log_page, log_tail
from controlpanel.engine.models import (
    FINAL_STATES,
    Job,
    JobLogLine,
    JobState,
    Kind,
    Workload,
)
from controlpanel.engine.validation import (
    LOCAL_BACKEND_NOTE,
    runs_only_the_finetune_image,
    validate_job,
)
from controlpanel.flavors.models import Flavor
from controlpanel.projects.access import ProjectRequest, project_view
from training.protocol import Snapshot

log = logging.getLogger(__name__)
PAGE_SIZE = 50
LOG_TAIL = 500


@project_view()
def job_list(request: ProjectRequest) -> HttpResponse:
    project = request.access.project
    filters, problems = selectors.job_filters_check(
        filters=selectors.JobFilters.from_query(request.GET)
    )
    if problems and wants_fragment(request):
        # The fragment has no room for messages: reload the page, which shows them.
        return HttpResponseClientRedirect(request.get_full_path())
    for problem in problems.values():
        messages.error(request, problem)
    query = request.GET.copy()
    for name in problems:
        query.pop(name, None)  # pager links and polling use only the valid filters
    page = Paginator(
        selectors.jobs_for_project(project=project, filters=filters), PAGE_SIZE
    ).get_page(request.GET.get("page"))
    context = {
        "project": project,
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


def status_version(job: Job, queue_position: int | None) -> str:
    """What the status block shows, in 16 hex digits. Its poll carries the version the page
    holds and is answered 204 (htmx swaps nothing) while it is still this one: no template,
    no cost or utilisation lookups, one answer of a few bytes each second per open page."""
    return _version(tuple(getattr(job, name) for name in VERSIONED), queue_position)


def _version(fields: tuple[Any, ...], queue_position: int | None) -> str:
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


def _detail_context(job: Job, queue_position: int | None) -> dict[str, Any]:
    return {
        "job": job,
        "project": job.project,
        "progress": Snapshot.from_json(job.progress),
        "events": job.events.order_by("at", "pk"),
        "cost": selectors.job_cost_estimate(job=job),
        "hourly": selectors.hourly_price(flavor=job.flavor, units=job.gpu),
        "queue_position": queue_position,
        "status_version": status_version(job, queue_position),
        "utilisation": workload_utilisation(job) if job.flavor.is_gpu else None,
    }


@project_view()
def job_detail(request: ProjectRequest, job_id: str) -> HttpResponse:
    job = selectors.job_get(project=request.access.project, job_id=job_id)
    position = selectors.queue_position(job=job)
    context = _detail_context(job, position) | log_context(job, log_tail(job=job, count=LOG_TAIL))
    context["earlier_runs"] = range(job.run - 1, 0, -1)
    return render(request, "jobs/detail.html", context)


@project_view()
def job_status(request: ProjectRequest, job_id: str) -> HttpResponse:
    """The status block (htmx, every second while the job is live); 204 while `?v=` is what
    it would show (status_version)."""
    if unchanged_status(request, job_id):
        return HttpResponse(status=204)
    job = selectors.job_get(project=request.access.project, job_id=job_id)
    position = selectors.queue_position(job=job)
    if request.GET.get("v") == status_version(job, position):
        return HttpResponse(status=204)
    return render(request, "jobs/detail.html#job-status", _detail_context(job, position))


def log_context(workload: Workload, page: LogPage) -> dict[str, Any]:
    """What the log section and its poller show; their links are the workload kind's routes
    (a job's, a notebook's), so the one section serves both pages."""
    kind, key = {
        Kind.NOTEBOOK: ("notebook", "notebook_id"),
        Kind.APP: ("app", "app_id"),
    }.get(Kind(workload.kind), ("job", "job_id"))
    kwargs = {"slug": workload.project.slug, key: workload.pk}
    return {
        "workload": workload,
        "log": page,
        "lines": page.lines,
        "last_seq": page.next,
        "following": page.following,
        "detail_url": reverse(f"{kind}-detail", kwargs=kwargs),
        "logs_url": reverse(f"{kind}-logs", kwargs=kwargs),
        "download_url": reverse(f"{kind}-log-download", kwargs=kwargs),
    }


@project_view()
def job_logs(request: ProjectRequest, job_id: str) -> HttpResponse:
    """Lines after `?after=` of `?run=` (htmx: appended out of band, with the next poller)."""
    if idle_log_poll(request, Kind.JOB, job_id):
        return HttpResponse(status=204)
    job = selectors.job_get(project=request.access.project, job_id=job_id)
    return log_lines(request, job)


def idle_log_poll(request: ProjectRequest, kind: Kind, workload_id: str) -> bool:
    """Whether a log poller's question (htmx, `?run=N&after=S`) has nothing new to answer: N is
    the workload's current run, its log is still followed and no line of N comes after S. One
    indexed query, nothing else loaded; any other case (another project's or a missing workload
    included) goes the whole way, which answers it (404, the end of the log, the lines)."""
    if not wants_fragment(request):
        return False
    try:
        key = uuid.UUID(workload_id)
        run, after = int(request.GET["run"]), int(request.GET["after"])
    except (KeyError, ValueError):
        return False
    if after < 0 or after > MAX_OFFSET:
        return False
    newer = JobLogLine.objects.filter(job=OuterRef("pk"), run=run, seq__gt=after)
    found = (
        Workload.objects.filter(pk=key, kind=kind, project=request.access.project)
        .annotate(newer=Exists(newer))
        .values_list("run", "state", "logs_archived", "newer")
        .first()
    )
    if found is None:
        return False
    current, state, archived, has_newer = found
    if current != run or has_newer or (state in FINAL_STATES and archived):
        return False
    note_followed(key)  # read every collector round while someone follows
    return True


def log_lines(request: ProjectRequest, workload: Workload) -> HttpResponse:
    """The lines of a job's or a notebook's log after `?after=` of `?run=`."""
    try:
        run = logs.resolve_run(job=workload, value=request.GET.get("run"))
    except logs.UnknownRun as exc:
        return HttpResponse(str(exc), status=404, content_type="text/plain; charset=utf-8")
    try:
        after = min(max(int(request.GET.get("after", 0)), 0), MAX_OFFSET)
    except ValueError:
        after = 0
    note_followed(workload.pk)  # read every collector round while someone follows
    page = log_page(job=workload, after=after, limit=LOG_TAIL, run=run)
    context = {"project": workload.project} | log_context(workload, page)
    if wants_fragment(request):
        return render(request, "jobs/detail.html#log-append", context)
    return render(request, "jobs/logs.html", context)


@project_view()
def job_log_download(request: ProjectRequest, job_id: str) -> HttpResponse | StreamingHttpResponse:
    """The whole log of `?run=` (default: the current run) as a text file."""
    job = selectors.job_get(project=request.access.project, job_id=job_id)
    return log_download(job, request.GET.get("run"))


def log_download(workload: Workload, run_value: str | None) -> HttpResponse | StreamingHttpResponse:
    """The whole log of run `run_value` (default: the current run) of a job or a notebook."""
    try:
        run = logs.resolve_run(job=workload, value=run_value)
    except logs.UnknownRun as exc:
        # Plain text, not the bare 404 page: the message says which runs exist.
        return HttpResponse(str(exc), status=404, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(
        logs.iter_log_text(job=workload, run=run), content_type="text/plain; charset=utf-8"
    )
    name = f"{workload.kind}-{workload.short_id}-run{run}.log"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


ACTIONS = {
    "stop": (services.job_stop, "Stop requested."),
    "rerun": (services.job_rerun, "Queued again."),
    "retry-push": (services.job_retry_push, "Retrying the push."),
    "delete": (services.job_delete, "Job deleted."),
}


@require_POST
@project_view()
def job_action(request: ProjectRequest, job_id: str, action: str) -> HttpResponse:
    access = request.access
    job = selectors.job_get(project=access.project, job_id=job_id)
    if action not in ACTIONS:
        return HttpResponse("Unknown action.", status=404)
    service, done = ACTIONS[action]
    try:
        service(access=access, user=request.user, job=job)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except PermissionDenied as exc:
        messages.error(request, str(exc))
        return redirect("job-detail", slug=access.project.slug, job_id=job.pk)
    else:
        messages.success(request, done)
        if action == "delete":
            return redirect("job-list", slug=access.project.slug)
    return redirect("job-detail", slug=access.project.slug, job_id=job.pk)
