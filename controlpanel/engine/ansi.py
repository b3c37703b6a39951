"""ANSI colour codes in log lines rendered as escaped HTML spans (never as raw markup)."""

from __future__ import annotations

import re

from django.utils.html import escape

SGR = re.compile(r"\x1b\[([0-9;]*)m")
OTHER_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-ln-z]|\x1b[()][A-Za-z0-9]|\r")
COLOURS = {30: "k", 31: "r", 32: "g", 33: "y", 34: "b", 35: "m", 36: "c", 37: "w"}


def _classes(codes: list[int], current: set[str]) -> set[str]:
    for code in codes or [0]:
        if code == 0:
            current = set()
        elif code == 1:
            current = current | {"ansi-bold"}
        elif code in COLOURS or (code - 60) in COLOURS:
            bright = "b" if code >= 90 else ""
            current = {c for c in current if not c.startswith("ansi-fg")}
            current.add(f"ansi-fg-{bright}{COLOURS[code % 60 if code >= 90 else code]}")
        elif code == 39:
            current = {c for c in current if not c.startswith("ansi-fg")}
    return current


def ansi_to_html(line: str) -> str:
    """Escape the text; turn SGR colour/bold codes into spans; drop other control codes."""
    line = OTHER_ESCAPES.sub("", line)
    parts: list[str] = []
    classes: set[str] = set()
    position = 0
    for match in SGR.finditer(line):
        parts.append(_span(line[position : match.start()], classes))
        codes = [int(c) for c in match.group(1).split(";") if c.isdigit()]
        classes = _classes(codes, classes)
        position = match.end()
    parts.append(_span(line[position:], classes))
    return "".join(parts)


def _span(text: str, classes: set[str]) -> str:
    if not text:
        return ""
    if not classes:
        return escape(text)
    return f'<span class="{" ".join(sorted(classes))}">{escape(text)}</span>'
