from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from controlpanel.accounts.models import TOKEN_PREFIX, ApiToken, hash_token, new_raw_token

# last_used_at is written at most this often, so API calls do not write on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_create(
    *, user: Any, name: str, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token; the raw value is returned once and never stored."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the token a name."})
    if len(name) > 100:
        raise ValidationError({"name": "Use at most 100 characters."})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    raw = new_raw_token()
    token = ApiToken.objects.create(
        user=user, name=name, digest=hash_token(raw), hint=raw[:10], expires_at=expires_at
    )
    return token, raw


def token_revoke(*, token: ApiToken) -> None:
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now())


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
