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
        field = self.fields["datastore"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(d.alias, f"{d.alias} ({d.endpoint_url})") for d in datastore_list()]
        field.initial = default_datastore_alias()


class DeleteBucketForm(forms.Form):
    empty = forms.BooleanField(required=False, label="Also delete every object in it")
