"""What every kind's new page draws of its form: a grid of its fields, named in the template
(`{% include "engine/fields.html" with names="flavor gpu" %}`)."""

from __future__ import annotations

from typing import Any

from django import forms, template

register = template.Library()


@register.filter
def fields_named(form: forms.Form, names: str) -> list[Any]:
    """The bound fields of `form` named in `names` (separated by spaces), in that order; a
    name the form does not have is an error, so a template cannot silently drop a field."""
    return [form[name] for name in names.split()]
