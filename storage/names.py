"""Names that S3 and Ajuste accept: bucket names (AWS rules) and datastore aliases.

Every rule has its own message, so a form or a volume spec can say exactly what is wrong and where.
"""

from __future__ import annotations

import ipaddress
import re

BUCKET_NAME_MIN = 3
BUCKET_NAME_MAX = 63
ALIAS_MAX = 32
ALIAS_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")

_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")
# Reserved by AWS for access points, Object Lambda, directory/table buckets and docs.
_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


class BucketNameError(ValueError):
    """A bucket name that breaks an AWS naming rule; `position` is the 0-based offending index."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


class AliasError(ValueError):
    """A datastore alias outside `[A-Za-z][A-Za-z0-9_-]{0,31}`; `position` as above."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


def validate_bucket_name(name: str) -> None:
    """Raise BucketNameError naming the first AWS general-purpose bucket rule `name` breaks."""
    if not name:
        raise BucketNameError("bucket name is empty", 0)
    _check_bucket_characters(name)
    if len(name) < BUCKET_NAME_MIN:
        raise BucketNameError(
            f"bucket name is too short ({_chars(len(name))}; at least {BUCKET_NAME_MIN})",
            len(name),
        )
    if len(name) > BUCKET_NAME_MAX:
        raise BucketNameError(
            f"bucket name is too long ({len(name)} characters; at most {BUCKET_NAME_MAX})",
            BUCKET_NAME_MAX,
        )
    _check_bucket_shape(name)
    _check_bucket_reserved(name)


def _chars(count: int) -> str:
    return f"{count} character" if count == 1 else f"{count} characters"


def _check_bucket_characters(name: str) -> None:
    for index, char in enumerate(name):
        if char in _BUCKET_CHARS:
            continue
        if char.isupper():
            raise BucketNameError(
                f"uppercase letter {char!r} at position {index}: bucket names are lowercase",
                index,
            )
        raise BucketNameError(
            f"invalid character {char!r} at position {index}: bucket names use only "
            "lowercase letters, digits, dots and hyphens",
            index,
        )


def _check_bucket_shape(name: str) -> None:
    if not name[0].isalnum():
        raise BucketNameError(
            f"bucket name must start with a lowercase letter or digit, not {name[0]!r}", 0
        )
    if not name[-1].isalnum():
        raise BucketNameError(
            f"bucket name must end with a lowercase letter or digit, not {name[-1]!r}",
            len(name) - 1,
        )
    for bad, why in (("..", "two adjacent dots"), (".-", "a hyphen after a dot")):
        index = name.find(bad)
        if index != -1:
            raise BucketNameError(f"{why} at position {index} in bucket name", index)
    index = name.find("-.")
    if index != -1:
        raise BucketNameError(
            f"a dot after a hyphen at position {index} in bucket name: each dot-separated "
            "label must start and end with a letter or digit",
            index,
        )


def _check_bucket_reserved(name: str) -> None:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        pass
    else:
        raise BucketNameError(f"bucket name {name!r} is formatted like an IP address", 0)
    for prefix in _RESERVED_PREFIXES:
        if name.startswith(prefix):
            raise BucketNameError(f"bucket name must not start with the reserved {prefix!r}", 0)
    for suffix in _RESERVED_SUFFIXES:
        if name.endswith(suffix):
            raise BucketNameError(
                f"bucket name must not end with the reserved {suffix!r}", len(name) - len(suffix)
            )


def validate_alias(alias: str) -> None:
    """Raise AliasError unless `alias` is a letter then up to 31 letters, digits, '_' or '-'."""
    if not alias:
        raise AliasError("datastore alias is empty", 0)
    if not ("A" <= alias[0] <= "Z" or "a" <= alias[0] <= "z"):
        raise AliasError(f"datastore alias must start with a letter, not {alias[0]!r}", 0)
    for index, char in enumerate(alias):
        if not (char.isascii() and (char.isalnum() or char in "_-")):
            raise AliasError(
                f"invalid character {char!r} at position {index} in datastore alias: "
                "use letters, digits, '_' and '-'",
                index,
            )
    if len(alias) > ALIAS_MAX:
        raise AliasError(
            f"datastore alias is too long ({len(alias)} characters; at most {ALIAS_MAX})",
            ALIAS_MAX,
        )
