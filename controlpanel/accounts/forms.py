from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from django import forms
from django.contrib.auth import password_validation
from django.utils import timezone

from controlpanel.projects.models import Project, Role


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


class InviteForm(forms.Form):
    """Invite someone to a project by e-mail address (the Members page)."""

    email = forms.EmailField(
        label="E-mail address",
        max_length=254,
        help_text="They get a one-time link, and join when they open it and confirm (signed in "
        "with that address, or making an account).",
        widget=forms.EmailInput(attrs={"placeholder": "colleague@example.com"}),
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class SignUpForm(forms.Form):
    """An invitee's new account: the address is the invited one, not typed."""

    username = forms.CharField(
        label="User name",
        max_length=150,
        help_text="Letters, digits and @ . + - _ only.",
        widget=forms.TextInput(attrs={"autocomplete": "username"}),
    )
    first_name = forms.CharField(max_length=150, required=False)
    last_name = forms.CharField(max_length=150, required=False)
    password1 = forms.CharField(
        label="Password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=password_validation.password_validators_help_text_html(),
    )
    password2 = forms.CharField(
        label="Password again",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("password1") and data.get("password1") != data.get("password2"):
            self.add_error("password2", "The two passwords differ.")
        return data


class UserCreateForm(forms.Form):
    """A site admin makes an account; its owner sets the password through a one-time link."""

    username = forms.CharField(label="User name", max_length=150)
    email = forms.EmailField(label="E-mail address", max_length=254)
    first_name = forms.CharField(max_length=150, required=False)
    last_name = forms.CharField(max_length=150, required=False)
    is_staff = forms.BooleanField(
        label="Site admin", required=False, help_text="Sees every project, billing and this page."
    )
    project = forms.ModelChoiceField(
        queryset=Project.objects.order_by("name"),
        required=False,
        to_field_name="slug",
        help_text="Optional: add them to a project at once.",
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class HandOverForm(forms.Form):
    to = forms.CharField(label="New owner (user name)", max_length=150)
