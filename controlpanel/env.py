"""Typed reads of the environment: a bad value stops start-up with the variable's name.

`NAME_FILE` variants are honoured for secrets mounted by Kubernetes (the file's
content, stripped, wins over nothing; setting both is an error).
"""

from __future__ import annotations

import os
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    """The variable's value, or the content of the file `NAME_FILE` names, or the default."""
    value = os.environ.get(name)
    file_name = os.environ.get(f"{name}_FILE")
    if value is not None and file_name:
        raise ImproperlyConfigured(f"{name} and {name}_FILE are both set; set only one.")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {exc}") from exc
    return value if value is not None else default


def env_bool(name: str, default: bool) -> bool:
    value = env_str(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean; use 1/0, true/false, yes/no.")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = env_str(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from exc
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}.")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_str(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = (env_str(name) or default).strip()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of: {', '.join(choices)}.")
    return value


def env_percent(name: str, default: str) -> Decimal:
    """A percentage such as 20 or 7.7 (0 to 100, at most 4 decimals)."""
    value = (env_str(name) or default).strip()
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a number (a percentage, e.g. 20)."
        ) from None
    if not number.is_finite() or not 0 <= number <= 100:
        raise ImproperlyConfigured(f"{name}={value!r} is not a percentage from 0 to 100.")
    if number.as_tuple().exponent < -4:  # type: ignore[operator]
        raise ImproperlyConfigured(f"{name}={value!r} has more than 4 decimals.")
    return number
