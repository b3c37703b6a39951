"""A project's settings, written once for the settings page and `PATCH /api/v1/projects/<slug>/`:
who may change which (PRODUCT.md: managers the idle limit, the budget and notifications; site
admins the quotas too) and what a good value is, with errors under the fields' names."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import URLValidator
from django.db import models

from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import QUOTA_FIELDS, Project, validate_webhook_url

# The GPU idle policy (controlpanel/reclaim/policy.py).
GPU_IDLE_FIELDS = (
    "gpu_idle_percent",
    "gpu_idle_minutes",
    "gpu_idle_grace_minutes",
    "gpu_idle_jobs",
)

# In the order the page and the API list them.
MANAGER_FIELDS = (
    "notebook_idle_minutes",
    *GPU_IDLE_FIELDS,
    "monthly_budget",
    "budget_stops_running",
    "webhook_url",
)
SETTING_FIELDS = (*MANAGER_FIELDS, *QUOTA_FIELDS)
ADMIN_ONLY = "Only site admins change a project's quotas; ask one."
# A change of these may let waiting work start (a raised quota or budget).
ADMITS = frozenset({*QUOTA_FIELDS, "monthly_budget", "budget_stops_running"})


class FieldsRefused(PermissionDenied):
    """Settings the caller's role may not change: `fields` maps each to the reason."""

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__(" ".join(f"{name}: {reason}" for name, reason in fields.items()))
        self.fields = fields


@dataclass(frozen=True)
class SettingsChanged:
    """What one change did: each field's (old, new) value, and the job webhook's signing
    secret when this change made it (a first URL), to be shown once."""

    changed: dict[str, tuple[Any, Any]]
    webhook_secret: str | None = None

    @property
    def admits_more(self) -> bool:
        return bool(ADMITS & set(self.changed))


def allowed_fields(*, access: ProjectAccess) -> tuple[str, ...]:
    if access.is_admin:
        return SETTING_FIELDS
    return MANAGER_FIELDS if access.can_manage else ()


def project_settings_check(*, access: ProjectAccess, fields: Iterable[str]) -> None:
    """Refuse, before any value is read, a change the caller may not make: a member
    (PermissionDenied), a field that is no setting (ValidationError naming it), a quota
    asked by a manager (FieldsRefused naming it)."""
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can change its settings.")
    names = [str(name) for name in fields]
    unknown = {name[:64]: _not_a_setting(name) for name in names if name not in SETTING_FIELDS}
    if unknown:
        raise ValidationError(unknown)
    mine = allowed_fields(access=access)
    refused = {name: ADMIN_ONLY for name in names if name not in mine}
    if refused:
        raise FieldsRefused(refused)


def _not_a_setting(name: str) -> str:
    fixed = {"slug", "name", "created_at", "kueue_queue", "webhook_secret"}
    what = f"{name} is not changed here" if name in fixed else f"{name[:64]!r} is no setting"
    return f"{what}; the settings are {', '.join(SETTING_FIELDS)}."


def project_field(name: str) -> models.Field[Any, Any]:
    """A Project column by name (never a relation: every setting is a column)."""
    field = Project._meta.get_field(name)
    assert isinstance(field, models.Field), name
    return field


def _count(name: str, value: Any) -> int:
    """A whole number, 0 or more, within the column's range (the model field's checks)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValidationError("Give a whole number, 0 or more.")
    field = project_field(name)
    if isinstance(value, str) and not (
        len(value) <= 20 and value.strip().removeprefix("-").isdigit()
    ):
        raise ValidationError(f"{value[:40]!r} is not a whole number.")
    number: int = field.clean(int(value), None)
    return number


def _budget(name: str, value: Any) -> Any:
    from controlpanel.billing.budgets import parse_budget  # billing reads projects, not back

    if isinstance(value, bool):
        raise ValidationError("Give an amount such as 500 or 500.00 (0 for none).")
    return parse_budget(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValidationError("Give true or false.")
    return value


def _webhook(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError("Give a URL, or an empty text for no webhook.")
    url = value.strip()
    validate_webhook_url(url)  # the precise reasons first, then the generic check
    if url:
        URLValidator(schemes=["http", "https"], message="Enter a valid URL.")(url)
    limit = Project._meta.get_field("webhook_url").max_length or 200
    if len(url) > limit:
        raise ValidationError(f"Use at most {limit} characters (it has {len(url)}).")
    return url


def _choice(name: str, value: Any) -> str:
    choices = [str(key) for key, _ in project_field(name).choices or ()]
    if value not in choices:
        shown = repr(value)[:40] if isinstance(value, str) else "that"
        raise ValidationError(f"{shown} is not one of {', '.join(choices)}.")
    return str(value)


PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "gpu_idle_jobs": _choice,
    "monthly_budget": _budget,
    "budget_stops_running": _flag,
    "webhook_url": _webhook,
}


def project_settings_parse(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Each value checked and made the model's type; ValidationError naming every bad one."""
    values: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for name, value in changes.items():
        try:
            values[name] = PARSERS.get(name, _count)(name, value)
        except ValidationError as exc:
            errors[name] = exc.messages
    if errors:
        raise ValidationError(errors)
    return values
