from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from controlpanel.projects.models import Membership, Project, ProjectSecret


def projects_for_user(*, user: Any) -> QuerySet[Project]:
    """Projects a user may open: their memberships, or every project for staff."""
    if not user.is_authenticated:
        return Project.objects.none()
    if user.is_staff:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user)


def default_project_for(*, user: Any, preferred: str | None = None) -> Project | None:
    """The project to open when none is named: the last one used, else the first."""
    projects = projects_for_user(user=user)
    if preferred:
        found = projects.filter(slug=preferred).first()
        if found:
            return found
    return projects.order_by("name").first()


def members_of(*, project: Project) -> QuerySet[Membership]:
    return project.memberships.select_related("user").order_by("user__username")


def secrets_of(*, project: Project) -> QuerySet[ProjectSecret]:
    """The project's secrets for listing: name, who set it and when; the value is never
    loaded (deferred, so never decrypted) by a page or the API."""
    return (
        ProjectSecret.objects.filter(project=project)
        .defer("value")
        .select_related("updated_by")
        .order_by("name")
    )


def secret_names(*, project: Project) -> set[str]:
    return set(ProjectSecret.objects.filter(project=project).values_list("name", flat=True))


def secret_values(*, project: Project) -> dict[str, str]:
    """Every secret's value, for the compute backend only (the project's Secret)."""
    return {s.name: s.value for s in ProjectSecret.objects.filter(project=project)}
