from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.validators import URLValidator

from controlpanel.projects.models import (
    MAX_SECRET_BYTES,
    QUOTA_FIELDS,
    Project,
    Role,
    validate_webhook_url,
)
from controlpanel.projects.settings_rules import GPU_IDLE_FIELDS


class ProjectForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = [
            "name",
            "slug",
            *QUOTA_FIELDS,
            "monthly_budget",
            "notebook_idle_minutes",
        ]


class ProjectSettingsForm(forms.Form):
    """The settings page: the notebook idle limit and the budget for managers, the quotas too
    for site admins (`with_quotas`). Every field may be left empty (unchanged); the service
    checks each value again (settings_rules)."""

    def __init__(self, *args: Any, with_quotas: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = [
            "notebook_idle_minutes",
            *GPU_IDLE_FIELDS,
            "monthly_budget",
            "budget_stops_running",
        ]
        names += list(QUOTA_FIELDS) if with_quotas else []
        self.fields.update(forms.fields_for_model(Project, fields=names))
        for field in self.fields.values():
            field.required = False
        self.fields["notebook_idle_minutes"].label = "Notebook auto-stop (idle minutes)"
        self.fields["monthly_budget"].label = f"Monthly budget ({settings.CURRENCY})"
        self.fields["budget_stops_running"].label = "Also stop running work at 100 %"

    def changes(self) -> dict[str, Any]:
        """The values given (an empty number is left as it is)."""
        return {name: value for name, value in self.cleaned_data.items() if value not in (None, "")}


class WebhookForm(forms.Form):
    """The job webhook's URL; the signing secret is made by the service, never typed."""

    webhook_url = forms.CharField(
        label="Webhook URL",
        max_length=Project._meta.get_field("webhook_url").max_length,
        required=False,
        help_text="Receives a signed JSON POST when a job ends. Leave empty for none.",
        widget=forms.URLInput(attrs={"placeholder": "https://example.com/ajuste-hook"}),
    )

    def clean_webhook_url(self) -> str:
        url: str = self.cleaned_data["webhook_url"].strip()
        if url:
            validate_webhook_url(url)  # the precise reasons first, then the generic check
            URLValidator(schemes=["http", "https"], message="Enter a valid URL.")(url)
        return url


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_username(self) -> Any:
        username = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"No active user named “{username}”.")
        return user


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class SecretForm(forms.Form):
    """A project secret: its name and value (the service checks both; the value is never
    rendered back, even after an error)."""

    name = forms.CharField(
        max_length=63,
        help_text="Jobs use it as an env value: HF_TOKEN=secret:<name>.",
        widget=forms.TextInput(attrs={"placeholder": "HF_TOKEN", "autocomplete": "off"}),
    )
    value = forms.CharField(
        max_length=MAX_SECRET_BYTES,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted; never shown again. Setting an existing name replaces it.",
    )
