from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel import audit
from controlpanel.engine.leavers import (
    hand_over_target,
    leaver_work_hand_over,
    leaver_work_stop,
)
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import (
    MAX_SECRET_BYTES,
    NAME_RULE_FOR_SECRETS,
    SECRET_NAME_RE,
    Membership,
    Project,
    ProjectSecret,
    Role,
    new_webhook_secret,
    validate_webhook_url,
)
from controlpanel.projects.settings_rules import (
    SETTING_FIELDS,
    SettingsChanged,
    project_settings_check,
    project_settings_parse,
)
from controlpanel.streams import channels


def project_create(*, by: Any, slug: str, name: str, **settings: Any) -> Project:
    """Only site admins create projects; the creator is not made a member implicitly.

    `settings` are further Project fields (the quotas, monthly_budget, notebook_idle_minutes).
    """
    if not by.is_staff:
        raise PermissionDenied("Only site admins can create projects.")
    project = Project(slug=slug, name=name, **settings)
    project.full_clean()
    project.save()
    audit.record("project.create", actor=by, project=project, target=project, slug=slug, name=name)
    return project


@transaction.atomic
def project_settings_update(*, access: ProjectAccess, changes: dict[str, Any]) -> SettingsChanged:
    """Change what the caller may change (managers: the notebook idle limit, the budget, the
    job webhook; site admins: the quotas too). Every value is checked before any is written:
    a refused field (PermissionDenied, `FieldsRefused` naming it) or a bad value
    (ValidationError by field) changes nothing. One audit event names each field changed,
    its old and new value (the webhook's own event keeps only its host)."""
    project_settings_check(access=access, fields=changes)
    values = project_settings_parse(changes)
    project = _locked_project(access)
    changed = {
        name: (getattr(project, name), value)
        for name, value in values.items()
        if getattr(project, name) != value
    }
    secret = None
    if "webhook_url" in changed:
        secret = _webhook_apply(project, changed["webhook_url"][1])
    plain = [name for name in changed if name != "webhook_url"]
    if plain:
        for name in plain:
            setattr(project, name, changed[name][1])
        project.save(update_fields=plain)
        details = {name: f"{changed[name][0]} → {changed[name][1]}" for name in plain}
        audit.record("project.update", actor=None, project=project, target=project, **details)
    for name in (*SETTING_FIELDS, "webhook_secret"):  # the caller's copy shows what was saved
        setattr(access.project, name, getattr(project, name))
    return SettingsChanged(changed=changed, webhook_secret=secret)


@transaction.atomic
def project_webhook_set(*, access: ProjectAccess, url: str) -> str | None:
    """Set the job webhook URL ("" removes it; the secret is kept for a later URL).

    Returns the secret when this call made it (the first URL), else None."""
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can change the webhook.")
    url = url.strip()
    try:
        validate_webhook_url(url)
    except ValidationError as exc:
        raise ValidationError({"webhook_url": exc.messages}) from None
    project = _locked_project(access)
    made = _webhook_apply(project, url)
    _refresh(access.project, project)
    return made


def _webhook_apply(project: Project, url: str) -> str | None:
    """Write the (checked) URL on the locked row, with a secret for a first URL; the secret
    when made here."""
    project.webhook_url = url
    made = None
    if url and not project.webhook_secret:
        made = project.webhook_secret = new_webhook_secret()
    others = [field.name for field in Project._meta.fields if field.name != "webhook_url"]
    project.clean_fields(exclude=others)  # the URL's length and syntax
    project.save(update_fields=["webhook_url", "webhook_secret"])
    # The host only: a Slack or Teams webhook URL carries its own secret in the path.
    host = (urlsplit(url).hostname or "") if url else ""
    audit.record("webhook.set", actor=None, project=project, target=project, host=host)
    return made


@transaction.atomic
def project_webhook_secret_rotate(*, access: ProjectAccess) -> str:
    """A new signing secret (the old one stops verifying at once); returns it."""
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can change the webhook.")
    project = _locked_project(access)
    if not project.webhook_url:
        raise ValidationError("Set a webhook URL first.")
    project.webhook_secret = new_webhook_secret()
    project.save(update_fields=["webhook_secret"])
    _refresh(access.project, project)
    audit.record("webhook.rotate", actor=None, project=project, target=project)
    return project.webhook_secret


@transaction.atomic
def project_webhook_secret_ensure(*, project: Project) -> str:
    """The project's signing secret, made now if it has none (a URL set in the admin, or a
    secret no key decrypts any more): a webhook is never sent unsigned."""
    locked = Project.objects.select_for_update().get(pk=project.pk)
    if not locked.webhook_secret:
        locked.webhook_secret = new_webhook_secret()
        locked.save(update_fields=["webhook_secret"])
    project.webhook_secret = locked.webhook_secret
    return locked.webhook_secret


def _locked_project(access: ProjectAccess) -> Project:
    return Project.objects.select_for_update().get(pk=access.project.pk)


def _refresh(project: Project, saved: Project) -> None:
    """The caller's copy (request.access.project) shows what was saved."""
    project.webhook_url, project.webhook_secret = saved.webhook_url, saved.webhook_secret


def member_add(*, access: ProjectAccess, user: Any, role: str = Role.MEMBER) -> Membership:
    """Managers add members to their own project; admins to any."""
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can add members.")
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}; use member or manager."})
    if Membership.objects.filter(project=access.project, user=user).exists():
        raise ValidationError({"username": f"{user.username} is already a member."})
    membership = Membership.objects.create(project=access.project, user=user, role=role)
    audit.record(
        "member.add",
        actor=None,
        project=access.project,
        target=membership,
        user=user.username,
        role=role,
    )
    return membership


@transaction.atomic
def member_set_role(*, access: ProjectAccess, membership: Membership, role: str) -> Membership:
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can change roles.")
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}; use member or manager."})
    _keep_one_manager(membership, leaving=role != Role.MANAGER)
    was, membership.role = membership.role, role
    membership.save(update_fields=["role"])
    audit.record(
        "member.role",
        actor=None,
        project=access.project,
        target=membership,
        user=membership.user.username,
        role=role,
        was=was,
    )
    return membership


@transaction.atomic
def member_remove(
    *, access: ProjectAccess, membership: Membership, hand_over_to: str = ""
) -> list[Any]:
    """Remove the member; what they own in the project is handed over to the member named by
    `hand_over_to` (a username), or else stops (engine/leavers.py). The work handed over."""
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can remove members.")
    leaver = membership.user
    heir = (
        hand_over_target(project=access.project, leaver=leaver, username=hand_over_to)
        if hand_over_to
        else None
    )
    _keep_one_manager(membership, leaving=True)
    audit.record(
        "member.remove",
        actor=None,
        project=access.project,
        target=membership,
        user=membership.user.username,
        role=membership.role,
    )
    membership.delete()
    channels.member_removed(project_id=access.project.pk, user_id=membership.user_id)
    handed = []
    if heir is not None:
        # by=None: the audit takes the signed-in user of the request (the manager).
        handed = leaver_work_hand_over(project=access.project, leaver=leaver, to=heir, by=None)
    # What is still theirs there stops: nothing of theirs keeps running in a project they left.
    leaver_work_stop(
        user=leaver,
        project=access.project,
        reason=f"stopped: {membership.user.username} left the project",
    )
    return handed


def _keep_one_manager(membership: Membership, *, leaving: bool) -> None:
    """A project never loses its last manager (admins can still fix it in the admin).

    The project row is locked first: two managers demoting each other at once take turns, and
    the second counts after the first committed (a FOR UPDATE on a COUNT locks no row)."""
    if not leaving:
        return
    Project.objects.select_for_update().filter(pk=membership.project_id).first()
    role = Membership.objects.filter(pk=membership.pk).values_list("role", flat=True).first()
    if role != Role.MANAGER:
        return
    managers = Membership.objects.filter(project_id=membership.project_id, role=Role.MANAGER)
    if managers.count() <= 1:
        raise ValidationError("A project keeps at least one manager.")


def _secret_name(name: Any) -> str:
    if not isinstance(name, str) or not re.fullmatch(SECRET_NAME_RE, name):
        raise ValidationError(
            {"name": f"{name!r} is not a valid secret name. {NAME_RULE_FOR_SECRETS}"}
        )
    return name


@transaction.atomic
def project_secret_set(*, access: ProjectAccess, by: Any, name: str, value: str) -> ProjectSecret:
    """Create or replace the secret `name` (managers and site admins only). The value is
    stored encrypted and never shown again; jobs launched from now on get the new value."""
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can set secrets.")
    name = _secret_name(name)
    if not isinstance(value, str) or not value:
        raise ValidationError(
            {"value": "Give the secret's value (delete the secret to remove it)."}
        )
    if len(value.encode()) > MAX_SECRET_BYTES or "\x00" in value:
        raise ValidationError(
            {"value": f"The value must be text of at most {MAX_SECRET_BYTES:,} bytes, without NUL."}
        )
    _locked_project(access)  # two managers setting the same name take turns
    secret, made = ProjectSecret.objects.update_or_create(
        project=access.project,
        name=name,
        defaults={"value": value, "updated_by": by, "updated_at": timezone.now()},
    )
    audit.record(
        "secret.set", actor=by, project=access.project, target=secret, name=name, replaced=not made
    )
    return secret


@transaction.atomic
def project_secret_delete(*, access: ProjectAccess, name: str) -> None:
    """Remove the secret (managers and site admins only); a job that still references it
    fails at its next launch with the reason. Unknown names raise ProjectSecret.DoesNotExist."""
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can delete secrets.")
    deleted, _ = ProjectSecret.objects.filter(project=access.project, name=name).delete()
    if not deleted:
        raise ProjectSecret.DoesNotExist(f"No secret named {name!r} in this project.")
    audit.record(
        "secret.delete",
        actor=None,
        project=access.project,
        target=("projectsecret", name),
        name=name,
    )
