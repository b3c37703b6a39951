"""Request rates as the settings write them ("1200/min"): parsed exactly, or refused with the
variable's name at start-up. No DRF import: the settings module reads these."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}
OFF = "off"
_RATE_RE = re.compile(r"(?P<count>[0-9]{1,9})/(?P<span>[0-9]{0,6})(?P<unit>[a-z]+)")


@dataclass(frozen=True)
class Rate:
    """`count` requests in each window of `seconds`."""

    count: int
    seconds: int


@lru_cache(maxsize=64)
def parse_rate(text: str) -> Rate | None:
    """`N/unit` or `N/<k><unit>` ("1200/min", "20/s", "5000/hour", "100/10s"), unit one of
    s, sec, second, m, min, minute, h, hour, d, day (the words also with a plural s); `off`
    is no limit. Anything else is a ValueError that says what is accepted."""
    value = text.strip().lower()
    if value == OFF:
        return None
    match = _RATE_RE.fullmatch(value)
    unit = match["unit"] if match else ""
    if unit not in UNITS and unit.endswith("s") and len(unit[:-1]) > 1 and unit[:-1] in UNITS:
        unit = unit[:-1]
    if match is None or unit not in UNITS:
        raise ValueError(
            f"{text!r} is not a rate: write requests/period such as 1200/min, 20/s, 5000/hour "
            "or 100/10s (units s, min, hour, day), or off."
        )
    count, span = int(match["count"]), int(match["span"] or 1)
    if count < 1 or span < 1:
        raise ValueError(f"{text!r}: the number of requests and the period must be at least 1.")
    return Rate(count=count, seconds=span * UNITS[unit])


def env_rate(name: str, value: str | None, default: str) -> str:
    """The setting's text, once it parses (a bad value stops start-up naming `name`)."""
    text = default if value is None or value.strip() == "" else value.strip()
    try:
        parse_rate(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from exc
    return text
