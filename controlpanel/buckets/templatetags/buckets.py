"""Filters for the bucket pages."""

from __future__ import annotations

import unicodedata
from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

register = template.Library()


@register.filter
def ago(moment: datetime | None) -> str:
    """`just now`, `3 minutes ago`, `2 hours ago` (the largest unit only)."""
    if moment is None:
        return ""
    now = timezone.now()
    if now - moment < timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment, now, depth=1)} ago"


# Control (C0, C1), format (bidi overrides and isolates, zero-width joiners and spaces), line
# and paragraph separators: invisible, or reordering what follows, so one key could pass for
# another ("invoice\u202efdp.exe" shows as "invoiceexe.pdf").
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in HIDDEN_CATEGORIES


def _marker(char: str) -> str:
    return f"⟨U+{ord(char):04X}⟩"


@register.filter
def visible_key(value: str) -> SafeString:
    """`value` escaped, each hidden character shown as a marker such as ⟨U+202E⟩ (with the
    character's name on hover), so that a spoofed key is seen for what it is."""
    if not any(_hidden(char) for char in value):
        return escape(value)
    parts: list[str] = []
    for char in value:
        if not _hidden(char):
            parts.append(escape(char))
            continue
        name = unicodedata.name(char, "")  # C0/C1 controls have none
        title = f"U+{ord(char):04X} {name}".strip()
        parts.append(f'<abbr class="hidden-char" title="{escape(title)}">{_marker(char)}</abbr>')
    return mark_safe("".join(parts))  # noqa: S308 - every piece is escaped above


@register.filter
def visible_key_text(value: str) -> str:
    """`visible_key` for attributes (a title): the markers as plain text (autoescaped)."""
    return "".join(_marker(char) if _hidden(char) else char for char in value)
