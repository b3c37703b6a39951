from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Membership, Project, Role


def project_create(*, by: Any, slug: str, name: str, **settings: Any) -> Project:
    """Only site admins create projects; the creator is not made a member implicitly.

    `settings` are further Project fields (gpu_quota, monthly_budget, notebook_idle_minutes).
    """
    if not by.is_staff:
        raise PermissionDenied("Only site admins can create projects.")
    project = Project(slug=slug, name=name, **settings)
    project.full_clean()
    project.save()
    return project


def member_add(*, access: ProjectAccess, user: Any, role: str = Role.MEMBER) -> Membership:
    """Managers add members to their own project; admins to any."""
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can add members.")
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}; use member or manager."})
    if Membership.objects.filter(project=access.project, user=user).exists():
        raise ValidationError({"username": f"{user.username} is already a member."})
    return Membership.objects.create(project=access.project, user=user, role=role)


@transaction.atomic
def member_set_role(*, access: ProjectAccess, membership: Membership, role: str) -> Membership:
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can change roles.")
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}; use member or manager."})
    _keep_one_manager(membership, leaving=role != Role.MANAGER)
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def member_remove(*, access: ProjectAccess, membership: Membership) -> None:
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can remove members.")
    _keep_one_manager(membership, leaving=True)
    membership.delete()


def _keep_one_manager(membership: Membership, *, leaving: bool) -> None:
    """A project never loses its last manager (admins can still fix it in the admin)."""
    if not leaving or membership.role != Role.MANAGER:
        return
    managers = Membership.objects.select_for_update().filter(
        project=membership.project, role=Role.MANAGER
    )
    if managers.count() <= 1:
        raise ValidationError("A project keeps at least one manager.")
