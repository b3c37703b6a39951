from __future__ import annotations

from typing import Any

from django import forms

from controlpanel.buckets.selectors import datastore_list, default_datastore_alias


class BucketForm(forms.Form):
    """Create a bucket, or attach an existing one (the button pressed says which)."""

    name = forms.CharField(
        max_length=63,
        help_text="3 to 63 lowercase letters, digits, dots and hyphens.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    datastore = forms.ChoiceField()
    action = forms.ChoiceField(
        choices=[("create", "Create"), ("attach", "Attach")],
        initial="create",
        widget=forms.HiddenInput,
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(d.alias, f"{d.alias} ({d.endpoint_url})") for d in datastore_list()]
        self.fields["datastore"].choices = choices
        self.fields["datastore"].initial = default_datastore_alias()


class DeleteBucketForm(forms.Form):
    empty = forms.BooleanField(required=False, label="Also delete every object in it")


class ObjectDeleteForm(forms.Form):
    """Keys and folders ticked in the browser; `prefix` is the folder shown, to go back to."""

    prefix = forms.CharField(required=False, max_length=1024)

    def selection(self, data: Any) -> tuple[list[str], list[str]]:
        keys = [key for key in data.getlist("key") if key]
        folders = [folder for folder in data.getlist("folder") if folder]
        return keys, folders
