"""One check for every name a person types and others read (projects, jobs, API tokens):
no control characters (Cc: C0, DEL, C1), no format characters (Cf: bidi overrides and
isolates, zero-width spaces and joiners, the BOM), no line or paragraph separators (Zl, Zp).
Any of them can make a name look like another one, or reorder what is shown around it."""

from __future__ import annotations

import unicodedata

from django.core.exceptions import ValidationError

REFUSED_CATEGORIES = {"Cc", "Cf", "Zl", "Zp"}


def hidden_characters(value: str) -> list[str]:
    """The refused characters in `value`, as U+XXXX with their Unicode names, in order."""
    found = []
    for char in dict.fromkeys(c for c in value if unicodedata.category(c) in REFUSED_CATEGORIES):
        name = unicodedata.name(char, "a control character")
        found.append(f"U+{ord(char):04X} ({name})")
    return found


def validate_visible_name(value: str) -> None:
    """Raise ValidationError naming the invisible or reordering characters in `value`."""
    found = hidden_characters(value)
    if found:
        raise ValidationError(
            "Remove the invisible or control characters: " + ", ".join(found) + ".",
            code="hidden_characters",
        )
