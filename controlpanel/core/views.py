from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache

from controlpanel.core.health import readiness
from controlpanel.projects.access import page_login_required
from controlpanel.projects.selectors import default_project_for


@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@never_cache
def readyz(request: HttpRequest) -> HttpResponse:
    checks = readiness()
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
    )


@page_login_required
def home(request: HttpRequest) -> HttpResponse:
    project = default_project_for(user=request.user, preferred=request.session.get("project"))
    if project is None:
        return render(request, "core/no_project.html")
    return redirect("project-home", slug=project.slug)
