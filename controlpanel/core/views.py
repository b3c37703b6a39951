from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache

from controlpanel.core.health import GATING, is_ready, readiness
from controlpanel.projects.access import page_login_required
from controlpanel.projects.selectors import default_project_for


@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@never_cache
def readyz(request: HttpRequest) -> HttpResponse:
    """200 when this process can answer requests (database reachable, schema up to date);
    the broker and storage are reported in `checks` but do not gate (`gating` names those that
    do)."""
    checks = readiness()
    ready = is_ready(checks)
    body = {
        "status": "ok" if ready else "unavailable",
        "checks": checks,
        "gating": sorted(GATING & set(checks)),
    }
    return JsonResponse(body, status=200 if ready else 503)


@page_login_required
def home(request: HttpRequest) -> HttpResponse:
    project = default_project_for(user=request.user, preferred=request.session.get("project"))
    if project is None:
        return render(request, "core/no_project.html")
    return redirect("project-home", slug=project.slug)
