from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone

TOKEN_PREFIX = "ajt_"  # noqa: S105 (a prefix, not a secret)


def hash_token(raw: str) -> str:
    """Tokens are random 256-bit strings, so a plain SHA-256 is enough (no slow KDF needed)."""
    return hashlib.sha256(raw.encode()).hexdigest()


def new_raw_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class User(AbstractUser):
    """A person who logs in; staff users are site admins."""


class ApiToken(models.Model):
    """A personal API token, shown once at creation and stored only as its SHA-256 hash."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tokens"
    )
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    # The first characters, kept to tell tokens apart in lists without revealing them.
    hint = models.CharField(max_length=12)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The token that made this one through the API (None: made in a logged-in session or by
    # `manage.py apitoken`). A child never outlives it: its expiry is capped at the parent's,
    # and revoking the parent revokes its children.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @property
    def is_active(self) -> bool:
        now = timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)
