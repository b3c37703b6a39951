"""What the notebook and app pages share (notebook_views.py, app_views.py): a page of the list,
the detail page's log section, the status fragment of a workload deleted while its page was
open, and the action buttons' answer. Their routes are `<noun>-list` and `<noun>-detail`
(the latter with `<noun>_id`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from controlpanel.core.htmx import wants_fragment
from controlpanel.engine.logpage import log_tail
from controlpanel.engine.models import Workload
from controlpanel.engine.views import LOG_TAIL, log_context
from controlpanel.projects.access import ProjectRequest

PAGE_SIZE = 50


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
    noun: str,
) -> HttpResponse:
    """A button's POST: `actions[action]`'s service on the workload, its message (or the
    refusal's) for the next page, which is the detail page (the list after a delete)."""
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
