"""`{{ bytes|binary_size }}` on every page (a template builtin, see settings.TEMPLATES): the
units the CLI prints. Django's `filesizeformat` counts in 1024s but writes KB and MB."""

from __future__ import annotations

from django import template

from controlpanel.core import units

register = template.Library()


@register.filter
def binary_size(size: int | None) -> str:
    return units.binary_size(None if size in (None, "") else int(size))
