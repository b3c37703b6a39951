"""App-only tokens (issue 25): a token that calls one project's apps and nothing else, for the
programs that call a private app. A personal token reaches everything its owner can (a staff
member's is a site admin's credential); an app-only token is accepted only by the user-content
gate for that project's apps (served/auth.py `app_caller`), never by the API, whose
authentication looks up personal tokens only. A project's managers (and site admins) make
them, see the raw value once, and revoke them; only the SHA-256 digest is stored."""

from __future__ import annotations

import secrets
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.utils import timezone

from controlpanel import audit
from controlpanel.accounts.models import APP_TOKEN_PREFIX, AppToken, hash_token
from controlpanel.accounts.services import LAST_USED_RESOLUTION
from controlpanel.core.validators import validate_visible_name
from controlpanel.projects.access import ProjectAccess

MANAGERS_ONLY = "Only the project's managers can make or revoke app-only tokens."


def _manager(access: ProjectAccess) -> None:
    if not access.can_manage:
        raise PermissionDenied(MANAGERS_ONLY)


def app_tokens_of(*, access: ProjectAccess) -> QuerySet[AppToken]:
    """The project's app-only tokens, revoked ones too (newest first); managers only."""
    _manager(access)
    return AppToken.objects.filter(project=access.project)


def app_token_create(*, access: ProjectAccess, by: Any, name: str) -> tuple[AppToken, str]:
    """A new token for the project's apps; the raw value is returned once, never stored."""
    _manager(access)
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the token a name."})
    if len(name) > 100:
        raise ValidationError({"name": "Use at most 100 characters."})
    try:
        validate_visible_name(name)
    except ValidationError as exc:
        raise ValidationError({"name": exc.messages}) from None
    raw = APP_TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = AppToken.objects.create(
        project=access.project, name=name, digest=hash_token(raw), hint=raw[:10], created_by=by
    )
    audit.record("app_token.create", actor=by, project=access.project, target=token, name=name)
    return token, raw


def app_token_revoke(*, access: ProjectAccess, token_id: int) -> AppToken:
    """Revoke one of the project's tokens (a second revoke changes nothing); AppToken.DoesNotExist
    for another project's or an unknown id."""
    _manager(access)
    token = AppToken.objects.get(pk=token_id, project=access.project)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit.record(
            "app_token.revoke", actor=None, project=access.project, target=token, name=token.name
        )
    return token


def app_token_authenticate(*, raw: str) -> AppToken | None:
    """The unrevoked app-only token for `raw`, or None; refreshes last_used_at coarsely."""
    if not raw.startswith(APP_TOKEN_PREFIX):
        return None
    token = AppToken.objects.filter(digest=hash_token(raw), revoked_at=None).first()
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        AppToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token
