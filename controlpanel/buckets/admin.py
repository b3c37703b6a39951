"""Admins add datastores here; credentials are typed in, never shown back (hints only)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from controlpanel.buckets.models import Bucket, Datastore
from controlpanel.buckets.services import datastore_alias_check

FIELDS = ["alias", "endpoint_url", "public_endpoint_url", "region", "access_key", "secret_key"]


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
        return data


@admin.register(Datastore)
class DatastoreAdmin(admin.ModelAdmin):
    form = DatastoreForm
    list_display = [
        "alias",
        "endpoint_url",
        "public_endpoint_url",
        "region",
        "access_key_hint",
        "created_at",
    ]
    readonly_fields = ["access_key_hint", "secret_key_hint", "created_at"]
    search_fields = ["alias", "endpoint_url"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return FIELDS + (["access_key_hint", "secret_key_hint", "created_at"] if obj else [])


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
