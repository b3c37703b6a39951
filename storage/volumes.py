"""The volume-spec grammar: `<bucket>@<ALIAS>[/<prefix>]:<mount path>[:ro|rw|rwd]`.

(Interface fixed here; the parser and renderer live below.)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Mode(StrEnum):
    """How a volume travels: `ro` pulled only; `rw` pulled then pushed; `rwd` pushed with deletions."""

    RO = "ro"
    RW = "rw"
    RWD = "rwd"


@dataclass(frozen=True)
class VolumeSpec:
    """One parsed volume: `prefix` is "" for the whole bucket, else without leading/trailing '/'."""

    bucket: str
    alias: str
    prefix: str
    mount_path: str
    mode: Mode = Mode.RO


class VolumeSpecError(ValueError):
    """A spec that does not parse: `position` is the 0-based index in the text where it goes wrong."""

    def __init__(self, message: str, position: int | None = None, text: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = position
        self.text = text
