"""The toy kind's one page: its project's batches, one per line."""

from __future__ import annotations

from django.http import HttpResponse
from django.utils.html import escape

from controlpanel.projects.access import ProjectRequest, project_view
from tests.controlpanel.engine.toykind.models import Batch


@project_view()
def batch_list(request: ProjectRequest) -> HttpResponse:
    rows = Batch.objects.filter(project=request.access.project).order_by("name")
    return HttpResponse("".join(f"<li>{escape(b.name)} {b.state}</li>" for b in rows))
