"""Presigned URLs: downloads, small single-request uploads and multipart uploads from a browser.

The panel hands these URLs to the browser, so file bytes go straight between the browser and
the object store and never through Django. A multipart upload is: `create_multipart_upload`
(server side), `presign_upload_parts` (server side, in batches as the browser needs them), the
browser PUTs each part and reads its `ETag` header, `complete_multipart_upload` with those
ETags (server side), or `abort_multipart_upload` on cancel.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.errors import StorageError, s3_errors

DEFAULT_EXPIRES_S = 3600
MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB  # S3's minimum for every part but the last
MAX_PART_SIZE = 5 * 1024 * MiB  # S3's maximum for any part (5 GiB)
DEFAULT_PART_SIZE = 16 * MiB
MAX_PARTS = 10_000
MAX_OBJECT_SIZE = 5 * 1024 * 1024 * MiB  # 5 TiB


@dataclass(frozen=True)
class PartPlan:
    """How an upload of `size` bytes is cut: `part_count` parts of `part_size` bytes (the
    last one shorter)."""

    size: int
    part_size: int
    part_count: int


@dataclass(frozen=True)
class PresignedPart:
    """The URL the browser PUTs part `part_number` to."""

    part_number: int
    url: str


@dataclass(frozen=True)
class CompletedPart:
    """A part the browser uploaded, with the ETag the store answered."""

    part_number: int
    etag: str


def plan_parts(*, size: int, part_size: int = DEFAULT_PART_SIZE) -> PartPlan:
    """Part size and count for `size` bytes: at least 5 MiB a part (a smaller `part_size` is
    raised), at most 5 GiB (a bigger one is refused), at most 10,000 parts."""
    if size < 0 or size > MAX_OBJECT_SIZE:
        raise ValueError(f"an object holds 0 to {MAX_OBJECT_SIZE} bytes, not {size}")
    if part_size > MAX_PART_SIZE:
        raise ValueError(f"a part holds at most {MAX_PART_SIZE} bytes (5 GiB), not {part_size}")
    part_size = max(part_size, MIN_PART_SIZE, math.ceil(size / MAX_PARTS))
    return PartPlan(size=size, part_size=part_size, part_count=max(1, math.ceil(size / part_size)))


def content_disposition(filename: str, *, inline: bool = False) -> str:
    """A Content-Disposition value that every browser reads: an ASCII fallback name plus the
    exact UTF-8 name (RFC 6266 / RFC 5987)."""
    kind = "inline" if inline else "attachment"
    fallback = "".join(
        char if char.isascii() and char.isprintable() and char not in '"\\;' else "_"
        for char in filename
    )
    exact = quote(filename, safe="")
    return f"{kind}; filename=\"{fallback or 'download'}\"; filename*=UTF-8''{exact}"


def presign_get(
    config: DatastoreConfig,
    *,
    bucket: str,
    key: str,
    expires_in: int = DEFAULT_EXPIRES_S,
    filename: str | None = None,
    inline: bool = False,
) -> str:
    """A URL that downloads `key` as `filename` (default: the key's last segment)."""
    name = filename or posixpath.basename(key.rstrip("/")) or "download"
    params = {
        "Bucket": bucket,
        "Key": key,
        "ResponseContentDisposition": content_disposition(name, inline=inline),
    }
    return _presign(config, "get_object", params, expires_in)


def presign_put(
    config: DatastoreConfig,
    *,
    bucket: str,
    key: str,
    expires_in: int = DEFAULT_EXPIRES_S,
    content_type: str | None = None,
) -> str:
    """A URL for uploading a small file (up to 5 GB, better under ~100 MB) in one PUT; when
    `content_type` is given the browser must send that exact Content-Type header."""
    params = {"Bucket": bucket, "Key": key}
    if content_type:
        params["ContentType"] = content_type
    return _presign(config, "put_object", params, expires_in)


def create_multipart_upload(
    config: DatastoreConfig, *, bucket: str, key: str, content_type: str | None = None
) -> str:
    """Start a multipart upload of `key`; return its upload id."""
    params = {"Bucket": bucket, "Key": key}
    if content_type:
        params["ContentType"] = content_type
    with s3_errors(bucket=bucket, key=key):
        response = make_s3_client(config).create_multipart_upload(**params)
    return str(response["UploadId"])


def presign_upload_parts(
    config: DatastoreConfig,
    *,
    bucket: str,
    key: str,
    upload_id: str,
    part_numbers: Iterable[int],
    expires_in: int = DEFAULT_EXPIRES_S,
) -> list[PresignedPart]:
    """One PUT URL per part number (1 to 10,000)."""
    parts = []
    for number in part_numbers:
        if not 1 <= number <= MAX_PARTS:
            raise ValueError(f"part numbers run from 1 to {MAX_PARTS}, not {number}")
        params = {"Bucket": bucket, "Key": key, "UploadId": upload_id, "PartNumber": number}
        parts.append(PresignedPart(number, _presign(config, "upload_part", params, expires_in)))
    return parts


def complete_multipart_upload(
    config: DatastoreConfig,
    *,
    bucket: str,
    key: str,
    upload_id: str,
    parts: Sequence[CompletedPart],
) -> str:
    """Assemble the uploaded parts (in part-number order) into the object; return its ETag."""
    if not parts:
        raise StorageError("a multipart upload needs at least one part")
    ordered = sorted(parts, key=lambda part: part.part_number)
    manifest = {
        "Parts": [{"PartNumber": part.part_number, "ETag": _quoted(part.etag)} for part in ordered]
    }
    with s3_errors(bucket=bucket, key=key):
        response = make_s3_client(config).complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload=manifest
        )
    return str(response.get("ETag", "")).strip('"')


def abort_multipart_upload(
    config: DatastoreConfig, *, bucket: str, key: str, upload_id: str
) -> None:
    """Abort an upload and let the store drop its parts."""
    with s3_errors(bucket=bucket, key=key):
        make_s3_client(config).abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)


def _quoted(etag: str) -> str:
    etag = etag.strip()
    return etag if etag.startswith('"') else f'"{etag}"'


def _presign(
    config: DatastoreConfig, operation: str, params: dict[str, Any], expires_in: int
) -> str:
    if not 1 <= expires_in <= 7 * 24 * 3600:
        raise ValueError("a presigned URL lives 1 second to 7 days")
    with s3_errors(bucket=params.get("Bucket", ""), key=params.get("Key", "")):
        return str(
            make_s3_client(config, public=True).generate_presigned_url(
                operation, Params=params, ExpiresIn=expires_in
            )
        )
