"""Reads on notebooks: a project's list, one by id, and the images they may run."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet
from django.http import Http404

from controlpanel.engine.selectors import billed_runs
from controlpanel.notebooks.models import Notebook, NotebookImage
from controlpanel.projects.models import Project


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
