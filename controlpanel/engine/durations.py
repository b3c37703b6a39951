"""Durations as people write them (`30m`, `2h`, `1h30m`, `7d`) and back. The API keeps plain
seconds; the job form reads and shows these."""

from __future__ import annotations

import re

UNITS = {
    "w": 7 * 86400,
    "week": 7 * 86400,
    "weeks": 7 * 86400,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
}
PART = re.compile(r"\s*(\d+)\s*([a-z]+)\s*")
SHOWN = [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)]
EXAMPLES = "30m, 2h, 1h30m or 7d"


class DurationError(ValueError):
    """The text is not a duration; the message says what was expected."""


def parse_duration(text: str) -> int:
    """Seconds in `text`: a number with a unit, or several (`1h30m`); a bare number is seconds."""
    value = text.strip().lower()
    if not value:
        raise DurationError(f"Give a duration such as {EXAMPLES}.")
    if value.isdigit():
        return int(value)
    total, position = 0, 0
    while position < len(value):
        match = PART.match(value, position)
        if match is None or match.group(2) not in UNITS:
            raise DurationError(
                f"“{text.strip()}” is not a duration: write a number and a unit (s, m, h, d), "
                f"e.g. {EXAMPLES}."
            )
        total += int(match.group(1)) * UNITS[match.group(2)]
        position = match.end()
    return total


def format_duration(seconds: int) -> str:
    """`7d`, `1h30m`, `45s`: the largest units that say it exactly."""
    if seconds <= 0:
        return "0s"
    parts = []
    for unit, size in SHOWN:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
