from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone

TOKEN_PREFIX = "ajt_"  # noqa: S105 (a prefix, not a secret)
APP_TOKEN_PREFIX = "aja_"  # noqa: S105 (an app-only token's prefix)


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


class AppToken(models.Model):
    """An app-only token (issue 25): it calls one project's apps and nothing else (the
    user-content gate for apps accepts it, the API never does). Made by a manager, shown once,
    stored only as its SHA-256 hash, revocable."""

    project = models.ForeignKey(
        "projects.Project", on_delete=models.CASCADE, related_name="app_tokens"
    )
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"


class Invitation(models.Model):
    """A one-time link that lets whoever holds it join a project with a role, as the person
    whose e-mail address it was sent to. Only the SHA-256 of the link's token is stored; the
    link works until it is used, revoked or expires."""

    project = models.ForeignKey(
        "projects.Project", on_delete=models.CASCADE, related_name="invitations"
    )
    email = models.EmailField()
    role = models.CharField(max_length=10, default="member")
    digest = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["project", "email"])]

    def __str__(self) -> str:
        return f"{self.email} to {self.project_id} ({self.status})"

    @property
    def status(self) -> str:
        """pending, accepted, revoked or expired."""
        if self.accepted_at is not None:
            return "accepted"
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "pending"

    @property
    def is_pending(self) -> bool:
        return self.status == "pending"


class OidcIdentity(models.Model):
    """A user's account at the OpenID Connect provider: (issuer, subject) is who signs in;
    the groups are those of the last sign-in."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_oidc_subject")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class GroupGrant(models.Model):
    """A membership that OIDC_GROUP_MAPPING gave: the next sign-in changes its role when the
    mapping says so and removes it when the user's groups no longer grant it. Memberships
    added by hand have none and are left alone."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="group_grants"
    )
    project = models.ForeignKey(
        "projects.Project", on_delete=models.CASCADE, related_name="group_grants"
    )
    role = models.CharField(max_length=10)
    groups = models.JSONField(default=list, help_text="The groups that grant it.")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="one_grant_per_membership")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.project_id} ({self.role}, by group)"
