"""OIDC_GROUP_MAPPING, applied at each single sign-on: the provider's groups give and take
project roles (GroupGrant remembers which memberships a group gave). Memberships added by hand
are never changed. A project's last manager is never demoted nor removed by it: the membership
is kept, the reason logged and audited, and the next sign-in tries again (issue 25). Every
change is audited with the user as actor and `via: sso`."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlpanel import audit
from controlpanel.accounts.models import GroupGrant
from controlpanel.accounts.oidc_settings import GroupRule
from controlpanel.projects.models import Membership, Project, Role
from controlpanel.streams import channels

log = logging.getLogger(__name__)
RANK: dict[str, int] = {Role.MEMBER: 0, Role.MANAGER: 1}


def groups_of(claims: dict[str, Any]) -> list[str]:
    """The groups claim (OIDC_GROUPS_CLAIM) as a sorted list of names."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({str(g) for g in value if isinstance(g, str | int)})


def _wanted(rules: Iterable[GroupRule], groups: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Project slug → (the highest role the groups give, the groups that give it)."""
    wanted: dict[str, tuple[str, list[str]]] = {}
    held = set(groups)
    for rule in rules:
        if rule.group not in held:
            continue
        role, why = wanted.get(rule.project, (Role.MEMBER, []))
        if not why or RANK[rule.role] > RANK[role]:
            role = rule.role
        wanted[rule.project] = (role, sorted({*why, rule.group}))
    return wanted


@transaction.atomic
def group_mapping_apply(*, user: Any, groups: list[str]) -> None:
    """Make the memberships OIDC_GROUP_MAPPING gives match `groups`: added (or set to the
    mapped role) where a group grants one, removed where none does any more."""
    wanted = _wanted(settings.OIDC_GROUP_MAPPING, groups)
    projects = {p.slug: p for p in Project.objects.filter(slug__in=wanted)}
    for slug in set(wanted) - set(projects):
        log.warning("OIDC_GROUP_MAPPING names the project %r, which does not exist", slug)
    grants = {g.project_id: g for g in GroupGrant.objects.select_for_update().filter(user=user)}
    for slug, project in projects.items():
        role, why = wanted[slug]
        grant = grants.pop(project.pk, None)
        membership = Membership.objects.filter(project=project, user=user).first()
        if membership is not None and grant is None:
            continue  # added by hand: left alone
        if not _grant(user, project, membership, role, why):
            continue
        GroupGrant.objects.update_or_create(
            user=user,
            project=project,
            defaults={"role": role, "groups": why, "updated_at": timezone.now()},
        )
    for project_id, grant in grants.items():  # no group grants it any more
        _take_away(user, grant, project_id)


def _grant(
    user: Any, project: Project, membership: Membership | None, role: str, why: list[str]
) -> bool:
    """Add or re-role the membership; False when it is kept as it is (the last manager)."""
    details = {"user": user.username, "role": role, "via": "sso", "groups": why}
    if membership is None:
        made = Membership.objects.create(project=project, user=user, role=role)
        audit.record("member.add", actor=user, project=project, target=made, **details)
        return True
    if membership.role == role:
        return True
    if RANK[role] < RANK[membership.role] and _last_manager(membership):
        _kept(user, membership, wanted=role)
        return False
    was, membership.role = membership.role, role
    membership.save(update_fields=["role"])
    audit.record("member.role", actor=user, project=project, target=membership, was=was, **details)
    return True


def _take_away(user: Any, grant: GroupGrant, project_id: int) -> None:
    membership = (
        Membership.objects.select_related("project")
        .filter(project_id=project_id, user=user)
        .first()
    )
    if membership is not None:
        if _last_manager(membership):
            _kept(user, membership, wanted="none")
            return
        audit.record(
            "member.remove",
            actor=user,
            project=membership.project,
            target=membership,
            user=user.username,
            role=membership.role,
            via="sso",
            groups=[],
        )
        membership.delete()
        channels.member_removed(project_id=project_id, user_id=user.pk)  # its streams end
    grant.delete()


def _last_manager(membership: Membership) -> bool:
    """Whether the project would have no manager without this one. The project row is locked
    first, as projects.services does, so two sign-ins at once count one after the other."""
    Project.objects.select_for_update().filter(pk=membership.project_id).first()
    if membership.role != Role.MANAGER:
        return False
    others = Membership.objects.filter(project_id=membership.project_id, role=Role.MANAGER)
    return not others.exclude(pk=membership.pk).exists()


def _kept(user: Any, membership: Membership, *, wanted: str) -> None:
    log.warning(
        "OIDC_GROUP_MAPPING: %s stays manager of %s, its last manager (the groups give %s)",
        user.username,
        membership.project.slug,
        wanted,
    )
    audit.record(
        "member.kept",
        actor=user,
        project=membership.project,
        target=membership,
        user=user.username,
        role=membership.role,
        wanted=wanted,
        via="sso",
        reason="last manager",
    )
