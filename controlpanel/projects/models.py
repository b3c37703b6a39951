from __future__ import annotations

import logging
import secrets
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from controlpanel.buckets.crypto import DecryptionError, EncryptedTextField
from controlpanel.core import public_http
from controlpanel.core.validators import validate_visible_name

log = logging.getLogger(__name__)
SLUG_RE = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"


def validate_webhook_url(url: str) -> None:
    """Only http(s), with a host and no credentials: the body is signed instead (an empty URL
    passes: no webhook); a host that is, or resolves to, a non-public address is refused (it
    is checked again at every send). Says precisely what is wrong; URLField checks the rest."""
    if not url:
        return
    try:
        parts = urlsplit(url)
        has_credentials = parts.username is not None or parts.password is not None
        host = parts.hostname
    except ValueError:
        raise ValidationError("Enter a valid URL.", code="invalid") from None
    if parts.scheme.lower() not in ("http", "https"):
        got = f" (not {parts.scheme}:)" if parts.scheme else ""
        raise ValidationError(f"Use an http:// or https:// URL{got}.", code="scheme")
    if has_credentials:
        raise ValidationError(
            "Remove the user name and password from the URL: receivers check the "
            "X-Ajuste-Signature header instead.",
            code="credentials",
        )
    if not host:
        raise ValidationError("The URL has no host name.", code="host")
    try:
        public_http.check_url_host(url)
    except public_http.AddressRefused as exc:
        raise ValidationError(str(exc), code="address") from None


def new_webhook_secret() -> str:
    return secrets.token_urlsafe(32)


class WebhookSecretField(EncryptedTextField):
    """Encrypted at rest like datastore credentials (buckets/crypto.py). Empty stays empty, and
    a secret no key opens reads as empty (logged) rather than failing every page that loads
    the project: the next webhook then makes a new one."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if not value:
            return value
        try:
            return super().from_db_value(value, expression, connection)
        except DecryptionError as exc:
            log.error("project webhook secret unreadable, a new one will be made: %s", exc)
            return ""

    def get_prep_value(self, value: Any) -> Any:
        return value if value in (None, "") else super().get_prep_value(value)


class Role(models.TextChoices):
    MEMBER = "member", "Member"
    MANAGER = "manager", "Manager"


# What a project may use at once, in the order pages, forms and the API list them.
QUOTA_FIELDS = ("gpu_quota", "cpu_quota", "memory_gib_quota", "pod_quota", "storage_gib_quota")
GPU_IDLE_MAX_MINUTES = 24 * 60  # a check reads its whole span at once (Prometheus's points)
GPU_IDLE_JOBS = [("warn", "warn only"), ("stop", "stop")]


class Project(models.Model):
    """A team: members with roles, one Kubernetes namespace, quotas (GPUs, CPU, memory, pods,
    storage) and a monthly budget."""

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
        "GPU quota", default=8, help_text="Most GPUs the project may use at once."
    )
    # Enforced at admission (jobs wait in QUEUED) and by the namespace's ResourceQuota.
    cpu_quota = models.PositiveIntegerField(
        "CPU quota",
        default=256,
        help_text="Most vCPUs the project's jobs may request at once (0 = no limit).",
    )
    memory_gib_quota = models.PositiveIntegerField(
        "memory quota (GiB)",
        default=2048,
        help_text="Most memory, in GiB, the project's jobs may request at once (0 = no limit).",
    )
    pod_quota = models.PositiveIntegerField(
        "pod quota",
        default=100,
        help_text="Most jobs the project may run at once (0 = no limit).",
    )
    storage_gib_quota = models.PositiveIntegerField(
        "storage quota (GiB)",
        default=2048,
        help_text="Most workspace storage, in GiB, the project's runs may hold (0 = no limit).",
    )
    monthly_budget = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text=(
            "Spend per calendar month (UTC), in the panel's currency (0 = none): alerts at 50, "
            "80 and 100 %; at 100 % new launches wait until it is raised or the month ends."
        ),
    )
    budget_stops_running = models.BooleanField(
        default=False,
        help_text="When the month's budget is reached, also stop the project's running work.",
    )
    notebook_idle_minutes = models.PositiveIntegerField(
        default=120, help_text="Stop notebooks idle for this long (0 = never)."
    )
    # The GPU idle policy (controlpanel/reclaim): judged by what the GPUs do, from DCGM.
    gpu_idle_percent = models.PositiveSmallIntegerField(
        "GPU idle below (%)",
        default=10,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="A GPU below this utilisation counts as idle (the policy, idle money).",
    )
    gpu_idle_minutes = models.PositiveIntegerField(
        "GPU idle warning after (minutes)",
        default=0,
        validators=[MaxValueValidator(GPU_IDLE_MAX_MINUTES)],
        help_text="Warn the owner of work whose GPUs sat idle this long (0 = no policy).",
    )
    gpu_idle_grace_minutes = models.PositiveIntegerField(
        "then act after (minutes)",
        default=30,
        validators=[MaxValueValidator(GPU_IDLE_MAX_MINUTES)],
        help_text="After the warning: notebooks are stopped (workspace kept), jobs as below.",
    )
    gpu_idle_jobs = models.CharField(
        "idle jobs",
        max_length=10,
        choices=GPU_IDLE_JOBS,
        default="warn",
        help_text="What an idle job gets after the grace period: a warning only, or a stop.",
    )
    kueue_queue = models.CharField(
        max_length=63,
        blank=True,
        help_text="Kueue LocalQueue for this project's jobs (clusters with Kueue); empty: none.",
    )
    webhook_url = models.URLField(
        blank=True,
        validators=[validate_webhook_url],
        help_text="Receives a signed JSON POST when a job ends (optional).",
    )
    # Signs webhook bodies (HMAC-SHA256), so it is encrypted, not hashed: it must be readable.
    webhook_secret = WebhookSecretField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        try:
            validate_visible_name(self.name)
        except ValidationError as exc:
            raise ValidationError({"name": exc.messages}) from None

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


SECRET_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"  # noqa: S105 (a pattern)
NAME_RULE_FOR_SECRETS = (
    "Use 1–63 letters, digits and underscores, not starting with a digit (like an environment "
    "variable)."
)
MAX_SECRET_BYTES = 32_768


class ProjectSecret(models.Model):
    """A value jobs of the project reference by name (env `NAME=secret:<name>`), encrypted at
    rest. Managers and site admins set it; no page or API ever shows the value again: jobs get
    it from the project's Kubernetes Secret (`secretKeyRef`) or, locally, in their process
    environment."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(
        max_length=63, validators=[RegexValidator(SECRET_NAME_RE, NAME_RULE_FOR_SECRETS)]
    )
    value = EncryptedTextField()
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="one_secret_per_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} in {self.project}"


class FirstRunDismissal(models.Model):
    """A user closed the project page's first-run card ("start here"): it stays closed for
    them in that project, whatever browser they use."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="one_dismissal_per_user")
        ]

    def __str__(self) -> str:
        return f"first-run card closed by {self.user} in {self.project}"
