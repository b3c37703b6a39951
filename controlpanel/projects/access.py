"""The one access helper every project page and endpoint starts with.

`project_access()` is the only place that decides whether a user may open a project: pages
reach it through `project_view()` (the slug in the URL), the API through
`controlpanel.api.scoping.api_project()` (the slug in the URL, `?project=`, the body or the
X-Ajuste-Project header). A project the user is not in answers 404 (its existence is not
revealed); a member asking for a manager's action answers 403. Staff users (site admins) see
every project.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, Concatenate, ParamSpec, cast
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import resolve_url

from controlpanel.projects.models import Membership, Project, Role

P = ParamSpec("P")


@dataclass(frozen=True)
class ProjectAccess:
    """What one user may do in one project."""

    project: Project
    role: str | None
    is_admin: bool

    @property
    def can_manage(self) -> bool:
        return self.is_admin or self.role == Role.MANAGER


def project_access(*, user: Any, slug: str, manage: bool = False) -> ProjectAccess:
    """Resolve `slug` for `user`, or raise Http404 / PermissionDenied."""
    if not user or not user.is_authenticated:
        raise Http404("No such project.")
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise Http404("No such project.")
    # One row at most (one_membership_per_user): no ordering, so no join on the user's name.
    mine = Membership.objects.filter(project=project, user=user).only("role")
    membership = mine.order_by("pk").first()
    if membership is None and not user.is_staff:
        raise Http404("No such project.")
    access = ProjectAccess(
        project=project, role=membership.role if membership else None, is_admin=user.is_staff
    )
    if manage and not access.can_manage:
        raise PermissionDenied("Only the project's managers can do this.")
    return access


class ProjectRequest(HttpRequest):
    """The request a `project_view()` view receives: `access` is the caller's access to the
    project the URL names. A type only (the request is Django's own, with `access` set)."""

    access: ProjectAccess


ProjectView = Callable[Concatenate[ProjectRequest, P], HttpResponseBase]


def project_view(
    *, manage: bool = False
) -> Callable[[ProjectView[P]], Callable[..., HttpResponseBase]]:
    """Decorate a view taking `slug`: log-in required, then the view gets a `ProjectRequest`
    (`request.access`) and the URL's other arguments, `slug` taken out."""

    def decorator(view: ProjectView[P]) -> Callable[..., HttpResponseBase]:
        @page_login_required
        @wraps(view)
        def wrapper(
            request: HttpRequest, slug: str, *args: P.args, **kwargs: P.kwargs
        ) -> HttpResponseBase:
            access = project_access(user=request.user, slug=slug, manage=manage)
            scoped = cast(ProjectRequest, request)
            scoped.access = access
            # Written only when it changes: an assignment marks the session modified, and every
            # poll of every open page would then write its row.
            if request.session.get("project") != access.project.slug:
                request.session["project"] = access.project.slug
            return view(scoped, *args, **kwargs)

        return wrapper

    return decorator


def page_login_required(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """`login_required`, except that an htmx request (a poll, a fragment) of a signed-out user
    gets 401 and `HX-Redirect` to the log-in page: following a redirect would swap the log-in
    page into the fragment's place (a session that expires under a polling page)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        if not request.headers.get("HX-Request"):
            return redirect_to_login(request.get_full_path())
        page = urlsplit(request.headers.get("HX-Current-URL") or request.get_full_path())
        back = page.path + (f"?{page.query}" if page.query else "")
        response = HttpResponse("Log in again.", status=401, content_type="text/plain")
        response["HX-Redirect"] = f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': back})}"
        return response

    return wrapper


def site_admin_page(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """The one gate of the site admins' pages (people, billing, audit, every project's
    dashboards): a signed-out visitor is sent to log in (`page_login_required`), anyone
    else but a site admin gets 404 (the page is not revealed)."""

    @page_login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        user: Any = request.user
        if not user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapper
