"""Admins add datastores here (credentials are typed in, never shown back: hints only), and
grant existing buckets to the projects that may attach them."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from controlpanel.buckets.models import (
    SHARED_BLAST_RADIUS,
    Bucket,
    BucketGrant,
    CredentialMode,
    Datastore,
)
from controlpanel.buckets.selectors import datastore_list
from controlpanel.buckets.services import datastore_alias_check
from storage.credentials import embedded_keys
from storage.datastore import DatastoreConfig
from storage.errors import StorageError
from storage.names import BucketNameError, validate_bucket_name

FIELDS = [
    "alias",
    "endpoint_url",
    "public_endpoint_url",
    "region",
    "access_key",
    "secret_key",
    "credential_mode",
    "role_arn",
    "sts_endpoint_url",
    "credential_duration_s",
]


# What a form that leaves the credential fields out gets for a new datastore.
FORM_DEFAULTS: dict[str, Any] = {
    "credential_mode": CredentialMode.SHARED,
    "credential_duration_s": 3600,
}


def pods_reach(mode: str) -> str:
    """The blast radius a credential mode leaves, in words for the admin page."""
    if mode == CredentialMode.EMBEDDED_SCOPED:
        return (
            "Each project's pods hold a key pair the embedded store issued for that project: it "
            "reaches that project's buckets only, and is narrowed or revoked when they go."
        )
    if mode == CredentialMode.STS:
        return (
            "Each project's pods hold STS session keys whose policy allows that project's "
            "buckets only. They cannot be revoked: a bucket deleted from the project stays "
            "reachable with keys issued before, until they expire (the duration below)."
        )
    return SHARED_BLAST_RADIUS


class DatastoreForm(forms.ModelForm):
    """Credentials are password fields that never render their value; left blank on an
    existing datastore, they keep the stored one. The alias goes through the same check as
    `datastore_create` (S3_ALIAS and environment-variable collisions)."""

    endpoint_url = forms.URLField(max_length=500, assume_scheme="https")
    public_endpoint_url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        required=False,
        help_text=Datastore._meta.get_field("public_endpoint_url").help_text,
    )
    # Not required: a form that leaves them out keeps the datastore's (or the defaults).
    credential_mode = forms.ChoiceField(
        choices=CredentialMode.choices,
        required=False,
        initial=CredentialMode.SHARED,
        help_text=Datastore._meta.get_field("credential_mode").help_text,
    )
    credential_duration_s = forms.IntegerField(
        min_value=900,
        max_value=43200,
        required=False,
        initial=3600,
        help_text=Datastore._meta.get_field("credential_duration_s").help_text,
    )
    sts_endpoint_url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        required=False,
        help_text=Datastore._meta.get_field("sts_endpoint_url").help_text,
    )
    access_key = forms.CharField(widget=forms.PasswordInput(render_value=False), required=False)
    secret_key = forms.CharField(widget=forms.PasswordInput(render_value=False), required=False)

    class Meta:
        model = Datastore
        fields = FIELDS

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("alias"):
            try:
                datastore_alias_check(alias=data["alias"], datastore_id=self.instance.pk)
            except ValidationError as error:
                self.add_error(None, error)
        for url in ("endpoint_url", "public_endpoint_url"):
            if data.get(url):
                data[url] = data[url].rstrip("/")
        for field in ("access_key", "secret_key"):
            if data.get(field):
                continue
            if self.instance.pk:
                data[field] = getattr(self.instance, field)  # keep the stored credential
            else:
                self.add_error(field, "Required for a new datastore.")
        for field in ("credential_mode", "credential_duration_s"):
            if data.get(field) in (None, ""):
                current = getattr(self.instance, field, None) if self.instance.pk else None
                data[field] = current or FORM_DEFAULTS[field]
        if data.get("credential_mode") == CredentialMode.EMBEDDED_SCOPED and not self.errors:
            self._check_issues_scoped_keys(data)
        return data

    def _check_issues_scoped_keys(self, data: dict[str, Any]) -> None:
        """Embedded scoped keys need Ajuste's embedded store, reached with its root key."""
        config = DatastoreConfig(
            alias=data["alias"],
            endpoint_url=data["endpoint_url"],
            region=data.get("region") or "us-east-1",
            access_key=data["access_key"],
            secret_key=data["secret_key"],
        )
        try:
            embedded_keys(config)
        except StorageError as error:
            self.add_error(
                "credential_mode",
                "This endpoint does not issue scoped keys with these credentials (it must be "
                f"Ajuste's embedded store, with its root key): {error.message}",
            )


@admin.register(Datastore)
class DatastoreAdmin(admin.ModelAdmin):
    form = DatastoreForm
    list_display = [
        "alias",
        "endpoint_url",
        "public_endpoint_url",
        "region",
        "access_key_hint",
        "credential_mode",
        "created_at",
    ]
    readonly_fields = ["access_key_hint", "secret_key_hint", "created_at", "pods_reach"]
    search_fields = ["alias", "endpoint_url"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        shown = ["access_key_hint", "secret_key_hint", "created_at", "pods_reach"]
        return FIELDS + (shown if obj else [])

    @admin.display(description="What pods can reach")
    def pods_reach(self, obj: Datastore) -> str:
        return pods_reach(obj.credential_mode)


@admin.register(Bucket)
class BucketAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "datastore",
        "project",
        "origin",
        "object_count",
        "total_size",
        "state",
        "created_at",
    ]
    list_filter = ["datastore", "origin", "state"]
    search_fields = ["name", "project__slug"]
    readonly_fields = ["object_count", "total_size", "stats_at", "empty_done", "empty_total"]


class BucketGrantForm(forms.ModelForm):
    """A grant names a valid bucket on a known datastore; a bucket another project has
    attached is detached there first (a grant never moves data between projects silently)."""

    class Meta:
        model = BucketGrant
        fields = ["datastore", "name", "project", "note"]

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        try:
            validate_bucket_name(name)
        except BucketNameError as error:
            raise ValidationError(error.message) from None
        return name

    def clean_datastore(self) -> str:
        alias: str = self.cleaned_data["datastore"]
        known = [info.alias for info in datastore_list()]
        if alias not in known:
            raise ValidationError(
                f"No datastore is named {alias!r} (known: {', '.join(known) or 'none'})."
            )
        return alias

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        alias, name, project = data.get("datastore"), data.get("name"), data.get("project")
        if alias and name and project:
            holder = (
                Bucket.objects.filter(datastore=alias, name=name)
                .exclude(project=project)
                .select_related("project")
                .first()
            )
            if holder is not None:
                self.add_error(
                    None,
                    f"{name}@{alias} is attached to the project {holder.project.slug}: "
                    "detach it there first.",
                )
        return data


@admin.register(BucketGrant)
class BucketGrantAdmin(admin.ModelAdmin):
    form = BucketGrantForm
    list_display = ["name", "datastore", "project", "granted_by", "granted_at", "note"]
    list_filter = ["datastore"]
    search_fields = ["name", "project__slug", "note"]
    readonly_fields = ["granted_by", "granted_at"]

    def save_model(self, request: HttpRequest, obj: BucketGrant, form: Any, change: bool) -> None:
        if not change or form.has_changed():
            obj.granted_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
