from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from controlpanel import audit
from controlpanel.accounts.models import TOKEN_PREFIX, ApiToken, hash_token, new_raw_token
from controlpanel.core.validators import validate_visible_name

# last_used_at is written at most this often, so API calls do not write on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_create(
    *, user: Any, name: str, expires_at: datetime | None = None, parent: ApiToken | None = None
) -> tuple[ApiToken, str]:
    """Create a token; the raw value is returned once and never stored.

    `parent` is the token the request came with (API calls): the new token expires when it
    does at the latest (no expiry given: the parent's), and is revoked with it."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the token a name."})
    if len(name) > 100:
        raise ValidationError({"name": "Use at most 100 characters."})
    try:
        validate_visible_name(name)
    except ValidationError as exc:
        raise ValidationError({"name": exc.messages}) from None
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    if parent is not None and parent.expires_at is not None:
        if expires_at is not None and expires_at > parent.expires_at:
            raise ValidationError(
                {
                    "expires_at": "A token made with another token cannot outlive it: choose "
                    f"an expiry at or before {parent.expires_at.isoformat()} (or none, to "
                    "expire with it)."
                }
            )
        expires_at = expires_at or parent.expires_at
    raw = new_raw_token()
    token = ApiToken.objects.create(
        user=user,
        name=name,
        digest=hash_token(raw),
        hint=raw[:10],
        expires_at=expires_at,
        parent=parent,
    )
    audit.record("token.create", actor=user, target=token, name=name, expires_at=expires_at)
    return token, raw


def token_revoke(*, token: ApiToken) -> None:
    """Revoke the token and every token made with it, and with those, and so on."""
    now = timezone.now()
    audit.record("token.revoke", actor=None, target=token, name=token.name, owner=token.user_id)
    ids = [token.pk]
    while ids:
        ApiToken.objects.filter(pk__in=ids, revoked_at=None).update(revoked_at=now)
        ids = list(ApiToken.objects.filter(parent_id__in=ids).values_list("pk", flat=True))


def token_authenticate(*, raw: str) -> ApiToken | None:
    """The active token for `raw`, or None; refreshes last_used_at coarsely."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    token = ApiToken.objects.select_related("user").filter(digest=hash_token(raw)).first()
    if token is None or not token.is_active or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
