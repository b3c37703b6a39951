from __future__ import annotations

from functools import partial
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from controlpanel.projects.models import Project
from controlpanel.projects.selectors import projects_for_user

# (label, url name taking the project slug, staff only). Sections whose URL is not
# registered are shown disabled rather than linked, so the shell never links to a 404.
SECTIONS = [
    ("Notebooks", "notebook-list", False),
    ("Jobs", "job-list", False),
    ("Apps", "app-list", False),
    ("Object Storage", "bucket-list", False),
    ("Dashboards", "dashboard", False),
    ("Billing", "billing", True),
]


def _section_links(request: HttpRequest, slug: str | None) -> list[dict[str, Any]]:
    links = []
    for label, name, staff_only in SECTIONS:
        if staff_only and not request.user.is_staff:
            continue
        url: str | None
        try:
            if staff_only:  # the site admins' pages cover every project
                url = reverse(name)
            else:
                url = reverse(name, kwargs={"slug": slug}) if slug else None
        except NoReverseMatch:
            url = None
        active = bool(url) and request.path.startswith(url or "\0")
        links.append({"label": label, "url": url, "active": active})
    return links


def shell(request: HttpRequest) -> dict[str, Any]:
    """Navigation and the project switcher for the base template."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    access = getattr(request, "access", None)
    current = access.project if access else _last_project(request, user)
    sections = _section_links(request, current.slug if current else None)
    section = next(
        (s for s in SECTIONS if any(link["active"] and link["label"] == s[0] for link in sections)),
        None,
    )
    return {
        "currency": settings.CURRENCY,
        "current_project": current,
        "current_access": access,
        # Called by the template only where it draws the switcher: the htmx polls of a page
        # (its log twice a second, its status every second) neither query nor reverse it.
        "project_switch": partial(
            _switch_links, user, section[1] if section and not section[2] else "project-home"
        ),
        "nav_sections": sections,
        "streams_url": settings.STREAMS_URL,  # where live pages open their streams
    }


def _last_project(request: HttpRequest, user: Any) -> Project | None:
    """Pages outside a project (Settings, New project, a 404) keep the project last opened,
    if the user may still open it, so the switcher and the sections stay where they were."""
    slug = request.session.get("project") if hasattr(request, "session") else None
    if not slug:
        return None
    return projects_for_user(user=user).filter(slug=slug).only("slug", "name").first()


def _switch_links(user: Any, url_name: str) -> list[dict[str, Any]]:
    """Switching project keeps the section (Jobs stays Jobs), never an object of the old one."""
    links = []
    for project in projects_for_user(user=user).only("slug", "name").order_by("name")[:200]:
        links.append({"project": project, "url": reverse(url_name, kwargs={"slug": project.slug})})
    return links
