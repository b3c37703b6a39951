"""Reads on apps: a project's list, and one by id."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from controlpanel.engine.selectors import listed, one_of
from controlpanel.projects.models import Project
from controlpanel.served.models import App


def apps_for_project(*, project: Project) -> QuerySet[App]:
    """The project's apps, newest first, with what the list shows."""
    return listed(App, project=project, defer=("progress", "log_cursor"))


def app_get(*, project: Project, app_id: Any) -> App:
    """An app of this project, or 404 (also for malformed ids and other projects' ones)."""
    app: App = one_of(apps_for_project(project=project), app_id, "app")
    return app
