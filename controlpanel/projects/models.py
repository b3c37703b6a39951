from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

SLUG_RE = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"


class Role(models.TextChoices):
    MEMBER = "member", "Member"
    MANAGER = "manager", "Manager"


class Project(models.Model):
    """A team: members with roles, one Kubernetes namespace, a GPU quota and a monthly budget."""

    slug = models.CharField(
        max_length=40,
        unique=True,
        validators=[
            RegexValidator(
                SLUG_RE,
                "Use 1–40 lowercase letters, digits and hyphens, starting and ending "
                "with a letter or digit.",
            )
        ],
        help_text="Short name used in URLs and as the Kubernetes namespace suffix.",
    )
    name = models.CharField(max_length=100)
    gpu_quota = models.PositiveIntegerField(
        default=8, help_text="Most GPUs the project may use at once."
    )
    monthly_budget = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Spend alert threshold per calendar month (0 = none).",
    )
    notebook_idle_minutes = models.PositiveIntegerField(
        default=120, help_text="Stop notebooks idle for this long (0 = never)."
    )
    kueue_queue = models.CharField(
        max_length=63,
        blank=True,
        help_text="Kueue LocalQueue for this project's jobs (clusters with Kueue); empty: none.",
    )
    webhook_url = models.URLField(
        blank=True, help_text="Receives a signed JSON POST when a job ends (optional)."
    )
    # Used to sign webhook bodies (HMAC-SHA256), so it must be readable, not hashed.
    webhook_secret = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def namespace(self) -> str:
        return f"ajuste-{self.slug}"


class Membership(models.Model):
    """A user's role in one project."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user")
        ]
        ordering = ["user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"
