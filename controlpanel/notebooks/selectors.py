"""Reads on notebooks: a project's list, one by id, and the images they may run."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from controlpanel.engine.selectors import billed_runs, listed, one_of
from controlpanel.notebooks.models import Notebook, NotebookImage
from controlpanel.projects.models import Project


def notebooks_for_project(*, project: Project) -> QuerySet[Notebook]:
    """The project's notebooks, newest first, with what the list shows."""
    return listed(Notebook, project=project, defer=("progress", "log_cursor", "env"))


def notebook_get(*, project: Project, notebook_id: Any) -> Notebook:
    """A notebook of this project, or 404 (also for malformed ids and other projects' ones)."""
    rows = Notebook.objects.filter(project=project).select_related("project", "owner", "flavor")
    notebook: Notebook = one_of(
        rows.prefetch_related("flavor__prices", billed_runs()), notebook_id, "notebook"
    )
    return notebook


def notebook_images() -> dict[str, NotebookImage]:
    """The images notebooks may run, by name, in the admin's order."""
    return {image.name: image for image in NotebookImage.objects.filter(enabled=True)}
