"""The volume-spec grammar: `<bucket>@<ALIAS>[/<prefix>]:<mount path>[:ro|rw|rwd]`.

`parse_volume_spec` returns a canonical `VolumeSpec` or raises `VolumeSpecError` (and nothing
else, whatever the text) with the 0-based position where the text goes wrong;
`render_volume_spec` writes the canonical form back, so `parse(render(v)) == v`.

Canonical form: the prefix has no leading or trailing '/', the mount path no trailing '/', and
the mode is always written. A prefix or a mount path cannot contain ':' (it separates the parts).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from storage.names import (
    AliasError,
    BucketNameError,
    validate_alias,
    validate_bucket_name,
)

__all__ = [
    "BucketNameError",
    "Mode",
    "VolumeSpec",
    "VolumeSpecError",
    "check_mount_paths",
    "parse_volume_spec",
    "parse_volume_specs",
    "render_volume_spec",
    "validate_bucket_name",
]

WORKSPACE = "/workspace"
MAX_PATH_BYTES = 1024  # S3's own limit on a key, applied to the prefix and the mount path
SYNTAX = "<bucket>@<ALIAS>[/<prefix>]:<mount path>[:ro|rw|rwd]"


class Mode(StrEnum):
    """How a volume travels: `ro` pulled only; `rw` pulled then pushed; `rwd` pushed with
    deletions."""

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
    """A spec that does not parse: `position` is the 0-based index in the text where it goes
    wrong (None for errors about several specs, such as colliding mount paths)."""

    def __init__(self, message: str, position: int | None = None, text: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = position
        self.text = text

    def __str__(self) -> str:
        if self.position is None or self.text is None:
            return self.message
        return f"{self.message} (at position {self.position} in {self.text!r})"


def parse_volume_spec(text: str) -> VolumeSpec:
    """Parse one volume spec; raise VolumeSpecError saying what is wrong and where."""
    if not isinstance(text, str):
        raise VolumeSpecError(f"a volume spec is text, not {type(text).__name__}", 0, None)
    if not text:
        raise VolumeSpecError(f"empty volume spec; expected {SYNTAX}", 0, text)
    at = text.find("@")
    if at == -1:
        colon = text.find(":")
        position = len(text) if colon == -1 else colon
        raise VolumeSpecError(
            f"missing '@<ALIAS>' after the bucket name; expected {SYNTAX}", position, text
        )
    bucket = _parse_bucket(text, at)
    end = _first_of(text, "/:", at + 1)
    alias = _parse_alias(text, at + 1, end)
    prefix = ""
    if end < len(text) and text[end] == "/":
        prefix_end = _first_of(text, ":", end + 1)
        prefix = _parse_prefix(text, end + 1, prefix_end)
        end = prefix_end
    mount_path, mode = _parse_tail(text, end)
    return VolumeSpec(bucket=bucket, alias=alias, prefix=prefix, mount_path=mount_path, mode=mode)


def parse_volume_specs(texts: Iterable[str]) -> list[VolumeSpec]:
    """Parse the volumes of one workload and check that their mount paths do not collide."""
    specs = [parse_volume_spec(text) for text in texts]
    check_mount_paths(specs)
    return specs


def render_volume_spec(spec: VolumeSpec) -> str:
    """The canonical text of `spec` (the mode is always written)."""
    prefix = f"/{spec.prefix}" if spec.prefix else ""
    return f"{spec.bucket}@{spec.alias}{prefix}:{spec.mount_path}:{Mode(spec.mode).value}"


def check_mount_paths(specs: Sequence[VolumeSpec]) -> None:
    """Raise VolumeSpecError when two volumes of one workload share or nest their mount paths."""
    for index, first in enumerate(specs):
        for second in specs[index + 1 :]:
            problem = _mount_conflict(first.mount_path, second.mount_path)
            if problem:
                raise VolumeSpecError(
                    f"volumes {render_volume_spec(first)!r} and {render_volume_spec(second)!r} "
                    f"{problem}"
                )


def _mount_conflict(first: str, second: str) -> str | None:
    if first == second:
        return f"use the same mount path {first}"
    if second.startswith(first.rstrip("/") + "/"):
        return f"have nested mount paths ({second} is inside {first})"
    if first.startswith(second.rstrip("/") + "/"):
        return f"have nested mount paths ({first} is inside {second})"
    return None


def _first_of(text: str, chars: str, start: int) -> int:
    """Index of the first of `chars` in text[start:], or len(text)."""
    hits = [index for index in (text.find(char, start) for char in chars) if index != -1]
    return min(hits, default=len(text))


def _parse_bucket(text: str, at: int) -> str:
    bucket = text[:at]
    if not bucket:
        raise VolumeSpecError("missing bucket name before '@'", 0, text)
    try:
        validate_bucket_name(bucket)
    except BucketNameError as error:
        raise VolumeSpecError(f"bad bucket name: {error.message}", error.position, text) from None
    return bucket


def _parse_alias(text: str, start: int, end: int) -> str:
    alias = text[start:end]
    if not alias:
        raise VolumeSpecError("missing datastore alias after '@'", start, text)
    try:
        validate_alias(alias)
    except AliasError as error:
        position = start + (error.position or 0)
        raise VolumeSpecError(f"bad alias: {error.message}", position, text) from None
    return alias


def _parse_prefix(text: str, start: int, end: int) -> str:
    prefix = text[start:end]
    if prefix.endswith("/"):
        prefix = prefix[:-1]  # `bucket@A/data/:...` means the same as `bucket@A/data:...`
    if not prefix:
        raise VolumeSpecError("empty prefix after '/'", start, text)
    _check_path_text(text, start, prefix, "prefix")
    offset = start
    for segment in prefix.split("/"):
        if segment in ("", ".", ".."):
            shown = "//" if segment == "" else segment
            raise VolumeSpecError(
                f"the prefix contains {shown!r}: use plain folder names", offset, text
            )
        offset += len(segment) + 1
    return prefix


def _parse_tail(text: str, start: int) -> tuple[str, Mode]:
    """Parse `:<mount path>[:<mode>]` starting at the ':' at `start`."""
    if start >= len(text):
        raise VolumeSpecError(
            "missing ':<mount path>' (for example ':/workspace/data')", len(text), text
        )
    parts = text[start + 1 :].split(":")
    if len(parts) > 2:
        position = start + 1 + len(parts[0]) + 1 + len(parts[1])
        raise VolumeSpecError(
            f"one ':' too many: the spec is {SYNTAX} and neither a prefix nor a mount path "
            "can contain ':'",
            position,
            text,
        )
    mount_path = _parse_mount_path(text, start + 1, parts[0])
    if len(parts) == 1:
        return mount_path, Mode.RO
    return mount_path, _parse_mode(text, start + 2 + len(parts[0]), parts[1])


def _parse_mount_path(text: str, start: int, path: str) -> str:
    if not path:
        raise VolumeSpecError("empty mount path after ':'", start, text)
    if not path.startswith("/"):
        raise VolumeSpecError(
            f"mount path {path!r} is not absolute: it must start with {WORKSPACE}/", start, text
        )
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    _check_path_text(text, start, path, "mount path")
    double = path.find("//")
    if double != -1:
        raise VolumeSpecError("mount path contains '//'", start + double, text)
    offset = start + 1
    for segment in path[1:].split("/"):
        if segment in (".", ".."):
            raise VolumeSpecError(f"mount path contains a {segment!r} segment", offset, text)
        offset += len(segment) + 1
    if path != WORKSPACE and not path.startswith(WORKSPACE + "/"):
        raise VolumeSpecError(
            f"mount path {path} is outside {WORKSPACE}: volumes are mounted under {WORKSPACE}/",
            start,
            text,
        )
    return path


def _parse_mode(text: str, start: int, mode: str) -> Mode:
    if not mode:
        raise VolumeSpecError("empty mode after ':'; expected ro, rw or rwd", start, text)
    try:
        return Mode(mode)
    except ValueError:
        raise VolumeSpecError(
            f"unknown mode {mode!r}; expected ro, rw or rwd", start, text
        ) from None


def _check_path_text(text: str, start: int, value: str, what: str) -> None:
    for index, char in enumerate(value):
        code = ord(char)
        if code < 32 or code == 127 or 0xD800 <= code <= 0xDFFF:
            raise VolumeSpecError(
                f"the {what} contains the control or invalid character {char!r}",
                start + index,
                text,
            )
    if len(value.encode("utf-8")) > MAX_PATH_BYTES:
        raise VolumeSpecError(f"the {what} is longer than {MAX_PATH_BYTES} bytes", start, text)
