from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone


class TokenCreateForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Where the token is used, e.g. “laptop CLI”.")
    expires_on = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Optional: the token stops working at the end of this day (UTC).",
    )

    def clean_expires_on(self) -> Any:
        day = self.cleaned_data.get("expires_on")
        if day is None:
            return None
        if day < timezone.now().date():
            raise forms.ValidationError("The expiry date is in the past.")
        return datetime.combine(day, time.min, tzinfo=UTC) + timedelta(days=1)
