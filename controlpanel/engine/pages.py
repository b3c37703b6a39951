"""What every kind's pages share: a page of the list, the detail page and its status fragment,
the detail page's log section and its poller's answers (lines after a sequence number, 204
while nothing is new, the download), the status fragment of a workload deleted while its page
was open, and the action buttons' answer. A kind's routes are `<kind>-list`, `<kind>-detail`,
`<kind>-status`, `<kind>-logs`, `<kind>-log-download` and `<kind>-action` (the detail ones
with `<kind>_id`).

They read rows only: the watcher, the sweep and the tasks talk to the cluster (a GET never
does), so a page costs the same whether one person watches a workload or fifty."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Page, Paginator
from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlpanel.api.pagination import MAX_OFFSET
from controlpanel.core.htmx import wants_fragment
from controlpanel.engine import logs
from controlpanel.engine.collector import note_followed
from controlpanel.engine.logpage import LogPage, log_page, log_tail
from controlpanel.engine.models import FINAL_STATES, JobLogLine, Workload
from controlpanel.engine.registry import kind_of
from controlpanel.projects.access import ProjectRequest, project_view

PAGE_SIZE = 50

LOG_TAIL = 500


def list_page(request: ProjectRequest, rows: QuerySet[Any]) -> Page[Any]:
    """The `?page=` of `rows`, PAGE_SIZE a page."""
    return Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))


def log_section(workload: Workload) -> dict[str, Any]:
    """The detail page's log: the current run's last lines, and the earlier runs to pick."""
    page = log_tail(job=workload, count=LOG_TAIL)
    return log_context(workload, page) | {"earlier_runs": range(workload.run - 1, 0, -1)}


def gone(request: ProjectRequest, missing: Http404, noun: str) -> HttpResponse:
    """The status fragment of a workload deleted while its page was open: the poll takes the
    browser to the list (a full page's request gets the 404 itself)."""
    if not wants_fragment(request):
        raise missing
    response = HttpResponse(f"No such {noun}.", status=404)
    response["HX-Redirect"] = reverse(f"{noun}-list", kwargs={"slug": request.access.project.slug})
    return response


def act(
    request: ProjectRequest,
    workload: Workload,
    action: str,
    actions: Mapping[str, tuple[Callable[..., Any], str]],
    noun: str | None = None,
) -> HttpResponse:
    """A button's POST: `actions[action]`'s service on the workload, its message (or the
    refusal's) for the next page, which is the detail page (the list after a delete). The
    services' keyword and the routes are the kind's name (`noun`, by default)."""
    noun = noun or kind_of(workload).name
    access = request.access
    if action not in actions:
        return HttpResponse("Unknown action.", status=404)
    service, done = actions[action]
    try:
        service(access=access, user=request.user, **{noun: workload})
    except (ValidationError, PermissionDenied) as exc:
        text = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        messages.error(request, text)
    else:
        messages.success(request, done)
        if action == "delete":
            return redirect(f"{noun}-list", slug=access.project.slug)
    where: dict[str, Any] = {"slug": access.project.slug, f"{noun}_id": workload.pk}
    return redirect(f"{noun}-detail", **where)


def log_context(workload: Workload, page: LogPage) -> dict[str, Any]:
    """What the log section and its poller show; their links are the workload kind's routes
    (a job's, a notebook's), so the one section serves both pages."""
    kind = kind_of(workload)
    kwargs = {"slug": workload.project.slug, f"{kind.name}_id": workload.pk}
    return {
        "workload": workload,
        "log": page,
        "lines": page.lines,
        "last_seq": page.next,
        "following": page.following,
        "progress_events": kind.progress_events,
        "detail_url": reverse(f"{kind.name}-detail", kwargs=kwargs),
        "logs_url": reverse(f"{kind.name}-logs", kwargs=kwargs),
        "download_url": reverse(f"{kind.name}-log-download", kwargs=kwargs),
    }


def idle_log_poll(request: ProjectRequest, kind: str, workload_id: str) -> bool:
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
        return render(request, "engine/log_section.html#log-append", context)
    return render(request, "engine/logs.html", context)


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


Getter = Callable[[ProjectRequest, str], Workload]


def log_views(noun: str, get: Getter) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """A kind's two log routes, `<noun>-logs` and `<noun>-log-download` (with `<noun>_id`),
    on its rows (`get`: one row of the request's project, or 404)."""

    @project_view()
    def logs(request: ProjectRequest, **ids: str) -> HttpResponse:
        """Lines after `?after=` of `?run=` (htmx: appended out of band, with the next
        poller); 204 while nothing changed."""
        workload_id = ids[f"{noun}_id"]
        if idle_log_poll(request, noun, workload_id):
            return HttpResponse(status=204)
        return log_lines(request, get(request, workload_id))

    @project_view()
    def log_file(request: ProjectRequest, **ids: str) -> HttpResponse | StreamingHttpResponse:
        """The whole log of `?run=` (default: the current run) as a text file."""
        return log_download(get(request, ids[f"{noun}_id"]), request.GET.get("run"))

    return logs, log_file


def detail_views(
    noun: str, get: Getter, context: Callable[[Any], dict[str, Any]], template: str, **extra: Any
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """A kind's `<noun>-detail` page and its `<noun>-status` fragment (the `<noun>-status`
    partial of `template`), on its rows (`get`): `context(row)` is what the status block
    shows; the page adds the log section and `extra`. A status poll of a deleted row goes to
    the list (`gone`)."""

    @project_view()
    def detail(request: ProjectRequest, **ids: str) -> HttpResponse:
        workload = get(request, ids[f"{noun}_id"])
        return render(request, template, context(workload) | log_section(workload) | extra)

    @project_view()
    def status(request: ProjectRequest, **ids: str) -> HttpResponse:
        try:
            workload = get(request, ids[f"{noun}_id"])
        except Http404 as missing:
            return gone(request, missing, noun)
        return render(request, f"{template}#{noun}-status", context(workload))

    return detail, status


def action_view(
    noun: str, get: Getter, actions: Mapping[str, tuple[Callable[..., Any], str]]
) -> Callable[..., Any]:
    """A kind's `<noun>-action` route (a POST): `act` with its `actions` on one of its rows."""

    @require_POST
    @project_view()
    def action(request: ProjectRequest, action: str, **ids: str) -> HttpResponse:
        return act(request, get(request, ids[f"{noun}_id"]), action, actions, noun)

    return action
