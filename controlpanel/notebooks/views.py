"""Notebook pages and their htmx fragments: the list, the form, the detail page with its live
status and the server's log, the actions, and Open (a redirect to the editor).

Like the job pages they read rows only (a GET never reaches the backend), and reuse the job
pages' pieces: the flavor picker, the bucket picker, errors placed by key, the log section."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from controlpanel.buckets.selectors import buckets_for_project
from controlpanel.core.htmx import wants_fragment
from controlpanel.dashboards.utilisation import workload_utilisation
from controlpanel.engine import selectors
from controlpanel.engine.pages import act, detail_views, list_page, log_views
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks import selectors as notebook_rows
from controlpanel.notebooks import services as notebooks
from controlpanel.notebooks import sharing
from controlpanel.notebooks.forms import EDITOR_LABELS, NotebookForm
from controlpanel.notebooks.kind import KIND
from controlpanel.notebooks.models import Notebook, NotebookImage
from controlpanel.notebooks.states import NotebookState
from controlpanel.notebooks.validation import validate_notebook
from controlpanel.projects.access import ProjectRequest, project_view
from controlpanel.queues.positions import mark_places
from controlpanel.usercontent.views import open_workload

IDLE_WARNING_MINUTES = 10
# States that change on their own soon: the pages poll fast while one is shown.
CHANGING = frozenset({NotebookState.STARTING, NotebookState.STOPPING, NotebookState.DELETING})


@dataclass(frozen=True)
class NotebookRow:
    """A notebook as the list shows it."""

    notebook: Notebook
    image_label: str
    editor_label: str
    cost: Decimal | None


@project_view()
def notebook_list(request: ProjectRequest) -> HttpResponse:
    project = request.access.project
    page = list_page(request, notebook_rows.notebooks_for_project(project=project))
    mark_places(page)
    images = notebook_rows.notebook_images()
    rows = [
        NotebookRow(
            notebook=notebook,
            image_label=_image_label(images, notebook),
            editor_label=EDITOR_LABELS.get(notebook.editor, notebook.editor),
            cost=selectors.workload_cost_estimate(workload=notebook),
        )
        for notebook in page
    ]
    context = {
        "project": project,
        "kind": KIND,
        "page": page,
        "rows": rows,
        "changing": any(notebook.state in CHANGING for notebook in page),
        "running": any(notebook.state == NotebookState.RUNNING for notebook in page),
    }
    template = (
        "notebooks/list.html#notebook-table" if wants_fragment(request) else "notebooks/list.html"
    )
    return render(request, template, context)


def _image_label(images: dict[str, NotebookImage], notebook: Notebook) -> str:
    """The label of the notebook's image in the admin's list (the image itself once the
    admin took it off the list)."""
    image = images.get(str(notebook.params.get("image", "")))
    return image.label if image else notebook.image


def _chosen_flavor(form: NotebookForm) -> Flavor | None:
    if form.is_bound:
        return form.cleaned_data.get("flavor") if hasattr(form, "cleaned_data") else None
    flavors = Flavor.objects.filter(enabled=True)
    return flavors.filter(name=form["flavor"].value()).first() or flavors.first()


def _form_context(request: ProjectRequest, form: NotebookForm) -> dict[str, Any]:
    project = request.access.project
    flavor = _chosen_flavor(form)
    units = form.cleaned_data.get("gpu") if form.is_bound else form["gpu"].value()
    form.describe_units(flavor)
    return {
        "project": project,
        "kind": KIND,
        "form": form,
        "editor_options": form.editor_options(),
        "estimate": selectors.hourly_price(flavor=flavor, units=units)
        if flavor and units
        else None,
        "buckets": buckets_for_project(project=project),
        "flavors": Flavor.objects.filter(enabled=True),
    }


@project_view()
def notebook_new(request: ProjectRequest) -> HttpResponse:
    access = request.access
    validating = bool(request.POST.get("validate"))
    data = NotebookForm.with_usable_editor(request.POST) if validating else request.POST
    form = NotebookForm(data if request.method == "POST" else None)
    if request.method == "POST":
        valid = form.is_valid()
        try:
            if valid and not validating:
                notebook = notebooks.notebook_create(
                    access=access, user=request.user, data=form.submission()
                )
                messages.success(request, f"Notebook {notebook.name} is starting.")
                return redirect(
                    "notebook-detail", slug=access.project.slug, notebook_id=notebook.pk
                )
            # Also check what the form itself accepted, so every problem shows at once.
            validate_notebook(project=access.project, data=form.submission())
        except ValidationError as exc:
            form.place_errors(exc)
        if validating:
            form.forget_missing()
    context = _form_context(request, form)
    if wants_fragment(request) and validating:
        return render(request, "notebooks/new.html#notebook-form", context)
    status = 400 if form.is_bound and form.errors else 200
    return render(request, "notebooks/new.html", context, status=status)


def _idle(notebook: Notebook) -> dict[str, Any]:
    """When an idle notebook stops: minutes left (from 0), and whether to warn."""
    deadline = notebooks.idle_deadline(notebook)
    if deadline is None:
        return {"idle_deadline": None, "idle_minutes": None, "idle_warning": False}
    minutes = max(0, math.ceil((deadline - timezone.now()).total_seconds() / 60))
    return {
        "idle_deadline": deadline,
        "idle_minutes": minutes,
        "idle_warning": minutes < IDLE_WARNING_MINUTES,
    }


def _detail_context(notebook: Notebook) -> dict[str, Any]:
    return {
        "notebook": notebook,
        "project": notebook.project,
        "image_label": _image_label(notebook_rows.notebook_images(), notebook),
        "editor_label": EDITOR_LABELS.get(notebook.editor, notebook.editor),
        "events": notebook.events.order_by("at", "pk"),
        "cost": selectors.workload_cost_estimate(workload=notebook),
        "hourly": selectors.hourly_price(flavor=notebook.flavor, units=notebook.gpu),
        "queue_position": (position := selectors.queue_place(job=notebook)),
        "reason": selectors.reason_shown(job=notebook, position=position),
        "utilisation": workload_utilisation(notebook) if notebook.flavor.is_gpu else None,
        "changing": notebook.state in CHANGING,
        "idle_limit": notebook.project.notebook_idle_minutes,
    } | _idle(notebook)


def _get(request: ProjectRequest, notebook_id: str) -> Notebook:
    return notebook_rows.notebook_get(project=request.access.project, notebook_id=notebook_id)


notebook_detail, notebook_status = detail_views(
    "notebook", _get, _detail_context, "notebooks/detail.html"
)

notebook_logs, notebook_log_download = log_views("notebook", _get)


@project_view()
def notebook_open(request: ProjectRequest, notebook_id: str) -> HttpResponse:
    """To the editor, on the notebook's own host, through a one-time ticket that becomes that
    host's cookie (controlpanel/usercontent): the panel's cookies never go there."""
    notebook = _get(request, notebook_id)
    if notebook.state == NotebookState.RUNNING and notebook.url:
        return open_workload(request, kind="notebook", workload=notebook)
    context = _detail_context(notebook)
    return render(request, "notebooks/not_running.html", context, status=409)


ACTIONS = {
    "start": (notebooks.notebook_start, "Starting."),
    "stop": (notebooks.notebook_stop, "Stopping: its rw volumes are pushed, its workspace kept."),
    "keep-alive": (notebooks.notebook_keep_alive, "Kept running: the idle clock starts again."),
    "delete": (notebooks.notebook_delete, "Deleting the notebook, its workspace with it."),
    "share": (sharing.notebook_share, "Shared: the project's members can open it."),
    "unshare": (sharing.notebook_unshare, "No longer shared: only you can open it."),
}
# The page's share form and each share's Unshare: the API's services, with the posted `member`.
MEMBER_ACTIONS = {
    "share-member": (sharing.notebook_share_member, "Shared with {}: they can open it."),
    "unshare-member": (sharing.notebook_unshare_member, "{} can no longer open it."),
}


@require_POST
@project_view()
def notebook_action(request: ProjectRequest, notebook_id: str, action: str) -> HttpResponse:
    notebook = _get(request, notebook_id)
    if action in MEMBER_ACTIONS:
        member = request.POST.get("member", "").strip()
        service, done = MEMBER_ACTIONS[action]
        one = {action: (partial(service, member=member), done.format(member))}
        return act(request, notebook, action, one, "notebook")
    return act(request, notebook, action, ACTIONS, "notebook")
