"""Admins add datastores here; credentials are typed in, never shown back (hints only)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from controlpanel.buckets.models import Bucket, Datastore


class DatastoreForm(forms.ModelForm):
    """Credentials are password fields that never render their value; left blank on an
    existing datastore, they keep the stored one."""

    endpoint_url = forms.URLField(max_length=500, assume_scheme="https")
    access_key = forms.CharField(widget=forms.PasswordInput(render_value=False), required=False)
    secret_key = forms.CharField(widget=forms.PasswordInput(render_value=False), required=False)

    class Meta:
        model = Datastore
        fields = ["alias", "endpoint_url", "region", "access_key", "secret_key"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
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
    list_display = ["alias", "endpoint_url", "region", "access_key_hint", "created_at"]
    readonly_fields = ["access_key_hint", "secret_key_hint", "created_at"]
    search_fields = ["alias", "endpoint_url"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = ["alias", "endpoint_url", "region", "access_key", "secret_key"]
        return fields + (["access_key_hint", "secret_key_hint", "created_at"] if obj else [])


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
