"""Datastores (S3 endpoints an admin adds) and the buckets projects own on them."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from controlpanel.buckets.crypto import EncryptedTextField, secret_hint
from controlpanel.projects.models import Project
from storage.datastore import DatastoreConfig
from storage.names import AliasError, validate_alias


def _check_alias(value: str) -> None:
    try:
        validate_alias(value)
    except AliasError as error:
        raise ValidationError(error.message) from None


class CredentialMode(models.TextChoices):
    """What a datastore gives pods: its own keys, or keys narrowed to one project's buckets."""

    SHARED = "shared", "Shared: pods get the datastore's own keys"
    EMBEDDED_SCOPED = "embedded-scoped", "Scoped keys issued by Ajuste's embedded store"
    STS = "sts", "STS AssumeRole with a per-project session policy"


SHARED_BLAST_RADIUS = (
    "Shared: every pod of every project holds this datastore's own key pair, so a job that "
    "reads its sync container's credentials reaches every bucket those keys reach, other "
    "projects' included. Use it only for keys that reach nothing but Ajuste's buckets of one "
    "trust domain; prefer STS (AWS, MinIO, Ceph RGW) or the embedded store's scoped keys."
)


def _check_role_arn(value: str) -> None:
    from storage.credentials import role_partition

    try:
        role_partition(value)
    except ValueError as error:
        raise ValidationError(str(error)) from None


class Datastore(models.Model):
    """A named S3 endpoint with credentials, added by an admin (the default one comes from the
    S3_* settings and is not stored). Credentials are encrypted at rest and only ever shown as
    hints; nothing but `config()` hands them out, to code that talks to S3."""

    alias = models.CharField(
        max_length=32,
        unique=True,
        validators=[_check_alias],
        help_text="Short name used in volume specs (bucket@ALIAS), e.g. GRA.",
    )
    endpoint_url = models.URLField(max_length=500, help_text="e.g. https://s3.gra.example.net")
    public_endpoint_url = models.URLField(
        max_length=500,
        blank=True,
        help_text=(
            "Where browsers and the CLI reach it, if not at the endpoint URL (the panel may "
            "reach http://minio:9000, a browser http://localhost:9000). Presigned URLs are "
            "signed for it. Blank: the endpoint URL."
        ),
    )
    region = models.CharField(max_length=64, default="us-east-1")
    access_key = EncryptedTextField()
    secret_key = EncryptedTextField()
    credential_mode = models.CharField(
        max_length=16,
        choices=CredentialMode.choices,
        default=CredentialMode.SHARED,
        help_text=(
            "What job and notebook pods get. STS: temporary keys for the role below, limited "
            "by a session policy to the project's buckets (they expire; renewed at each "
            "launch). Embedded: key pairs Ajuste's embedded store issues per project. "
            + SHARED_BLAST_RADIUS
        ),
    )
    role_arn = models.CharField(
        max_length=600,
        blank=True,
        validators=[_check_role_arn],
        help_text="STS only: the role pods' sessions assume (arn:aws:iam::123456789012:role/x); "
        "the datastore's keys must be allowed to assume it.",
    )
    sts_endpoint_url = models.URLField(
        max_length=500,
        blank=True,
        help_text="STS only: where STS answers. Blank: AWS's own for an amazonaws.com "
        "endpoint, else the endpoint URL (MinIO, Ceph RGW).",
    )
    credential_duration_s = models.PositiveIntegerField(
        default=3600,
        validators=[MinValueValidator(900), MaxValueValidator(43200)],
        help_text="STS only: how long pods' keys last (900 to 43,200 s, at most the role's "
        "maximum session; 3,600 s when the datastore's keys are themselves a role session).",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["alias"]

    def __str__(self) -> str:
        return self.alias

    def __repr__(self) -> str:
        return f"<Datastore {self.alias} {self.endpoint_url}>"

    def clean(self) -> None:
        if self.credential_mode == CredentialMode.STS and not self.role_arn:
            raise ValidationError({"role_arn": "STS needs the role pods' sessions assume."})

    @property
    def access_key_hint(self) -> str:
        return secret_hint(self.access_key)

    @property
    def secret_key_hint(self) -> str:
        return secret_hint(self.secret_key, head=0)

    def config(self) -> DatastoreConfig:
        return DatastoreConfig(
            alias=self.alias,
            endpoint_url=self.endpoint_url.rstrip("/"),
            region=self.region or "us-east-1",
            access_key=self.access_key,
            secret_key=self.secret_key,
            public_endpoint_url=self.public_endpoint_url.rstrip("/"),
        )


class Origin(models.TextChoices):
    CREATED = "created", "Created in Ajuste"
    ATTACHED = "attached", "Attached"


class BucketState(models.TextChoices):
    READY = "ready", "Ready"
    EMPTYING = "emptying", "Emptying"
    FAILED = "failed", "Deletion failed"


class Bucket(models.Model):
    """A bucket one project owns on one datastore: created through Ajuste, or an existing one
    attached by name after an access check. Deleting a created bucket deletes it on S3;
    deleting an attached one only detaches it (its data was never ours).

    The object figures are a snapshot refreshed by a task (listing 100k keys takes seconds);
    `empty_done`/`empty_total` show the progress of an "empty then delete" task."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="buckets")
    datastore = models.CharField(max_length=32, help_text="The datastore's alias.")
    name = models.CharField(max_length=63)
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.CREATED)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    object_count = models.BigIntegerField(null=True, blank=True)
    total_size = models.BigIntegerField(null=True, blank=True)
    stats_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=BucketState.choices, default=BucketState.READY)
    state_message = models.TextField(blank=True)
    empty_done = models.BigIntegerField(default=0)
    empty_total = models.BigIntegerField(null=True, blank=True)
    # Why the CORS rule browser uploads need could not be set ("" once it is), for the page.
    cors_error = models.CharField(max_length=500, blank=True)
    # The origins of the CORS rule Ajuste added to this bucket ([]: none added, as when the
    # bucket's own rules already allowed them): a detach removes that rule and nothing else.
    cors_origins_added = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["datastore", "name"], name="one_bucket_per_datastore")
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.datastore}"

    @property
    def is_busy(self) -> bool:
        return self.state == BucketState.EMPTYING

    @property
    def empty_percent(self) -> int:
        if not self.empty_total:
            return 0
        return min(100, int(self.empty_done * 100 / self.empty_total))


class BucketGrant(models.Model):
    """An admin's say that one project may attach one existing bucket of a datastore.

    Attaching hands the project the bucket's data through the datastore's shared keys, which
    reach every bucket there: that the keys can reach a bucket says nothing about whose it is,
    so only a grant (or a site admin attaching it) lets a project claim one. One grant per
    bucket: moving it to another project is an admin's decision too."""

    datastore = models.CharField(max_length=32, help_text="The datastore's alias.")
    name = models.CharField(max_length=63, help_text="The existing bucket's name.")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="bucket_grants")
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    granted_at = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=200, blank=True, help_text="Why, for the next admin.")

    class Meta:
        ordering = ["datastore", "name"]
        constraints = [
            models.UniqueConstraint(fields=["datastore", "name"], name="one_grant_per_bucket")
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.datastore} → {self.project.slug}"


class PodCredential(models.Model):
    """The keys one project's pods hold for one datastore, when the datastore issues narrowed
    ones (`CredentialMode.EMBEDDED_SCOPED`, `STS`): they reach `buckets` only. Kept so that a
    reconcile reuses them until the project's buckets there change (re-granted) or, for STS,
    until half their life is gone (renewed); revoked (embedded) or dropped (STS, which cannot
    revoke: they expire) when the project's last bucket on the datastore goes."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="pod_credentials")
    datastore = models.CharField(max_length=32, help_text="The datastore's alias.")
    mode = models.CharField(max_length=16, choices=CredentialMode.choices)
    access_key = models.CharField(max_length=128)
    secret_key = EncryptedTextField()
    session_token = EncryptedTextField(blank=True, default="")
    buckets = models.JSONField(default=list)
    issued_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "datastore"], name="one_pod_credential_per_datastore"
            )
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}@{self.datastore} ({self.mode})"
