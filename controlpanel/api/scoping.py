"""Project scoping for API views: which project a request names; whether the caller may open
it is `project_access()`'s answer, the same helper the pages' `project_view()` calls."""

from __future__ import annotations

from django.http import Http404
from rest_framework.request import Request

from controlpanel.projects.access import ProjectAccess, project_access
from controlpanel.projects.selectors import projects_for_user

PROJECT_HEADER = "HTTP_X_AJUSTE_PROJECT"


def api_project(
    request: Request, *, slug: str | None = None, manage: bool = False
) -> ProjectAccess:
    """The project named by the URL, `?project=`, the body's `project`, the X-Ajuste-Project
    header, or the user's only project; anything else is 404."""
    slug = (
        slug
        or request.query_params.get("project")
        or (request.data.get("project") if hasattr(request.data, "get") else None)
        or request.META.get(PROJECT_HEADER)
    )
    if not slug:
        projects = list(projects_for_user(user=request.user).values_list("slug", flat=True)[:2])
        if len(projects) != 1:
            raise Http404("Name the project with ?project=<slug> (you belong to several or none).")
        slug = projects[0]
    return project_access(user=request.user, slug=str(slug), manage=manage)
