"""Reads on apps: a project's list, and one by id."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet
from django.http import Http404

from controlpanel.projects.models import Project
from controlpanel.served.models import App


def apps_for_project(*, project: Project) -> QuerySet[App]:
    return (
        App.objects.filter(project=project)
        .select_related("project", "owner", "flavor")
        .prefetch_related("flavor__prices", "runs__flavor__prices")
        .defer("progress", "loss_curve", "log_cursor")
        .order_by("-created_at")
    )


def app_get(*, project: Project, app_id: Any) -> App:
    """An app of this project, or 404 (also for malformed ids and other projects' ones)."""
    try:
        key = uuid.UUID(str(app_id))
    except ValueError:
        raise Http404("No such app.") from None
    app = apps_for_project(project=project).filter(pk=key).first()
    if app is None:
        raise Http404("No such app.")
    return app
