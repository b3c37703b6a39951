"""Presigned transfers: bytes go straight between the client (browser, CLI) and S3, never
through Django. The caller has already resolved `bucket` through the project access helper,
so a URL is only ever signed for one of the caller's project's buckets."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError

from controlpanel.buckets.models import Bucket
from controlpanel.buckets.selectors import bucket_config
from controlpanel.buckets.services import bucket_stats_request
from storage import objects, presign

MAX_KEY_BYTES = 1024
MAX_PARTS_PER_REQUEST = 1000
URL_LIFETIME_S = 3600


@dataclass(frozen=True)
class UploadPlan:
    """A started multipart upload and how to cut the file."""

    key: str
    upload_id: str
    part_size: int
    part_count: int


DOT_SEGMENT_MESSAGE = (
    "The key has a '.' or '..' path segment, which browsers and HTTP clients rewrite in a "
    "URL, so it cannot travel through a presigned URL: use boto3 or the AWS CLI for it."
)


def has_dot_segment(key: str) -> bool:
    """True for `../x`, `a/./b`...: URL normalisation turns `/bucket/../x` into `/x`."""
    return any(segment in (".", "..") for segment in key.split("/"))


def key_problem(key: str) -> str | None:
    """Why we sign no URL for `key`, or None: a key is 1 to 1024 UTF-8 bytes, without control
    characters (S3 stores them, but they make keys unreadable in pages and shells, and some
    stores fail on them) and without a '.' or '..' segment."""
    if not key:
        return "The object key is empty."
    for index, char in enumerate(key):
        code = ord(char)
        if code < 32 or code == 127 or 0xD800 <= code <= 0xDFFF:
            return f"The key has the control character {char!r} at position {index}."
    size = len(key.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        return f"The key is {size} bytes long in UTF-8; S3 allows {MAX_KEY_BYTES}."
    if has_dot_segment(key):
        return DOT_SEGMENT_MESSAGE
    return None


def validate_key(key: str) -> None:
    """ValidationError({"key": ...}) naming what is wrong with `key` (see key_problem)."""
    problem = key_problem(key)
    if problem:
        raise ValidationError({"key": problem})


def download_url(*, bucket: Bucket, key: str) -> str:
    """A URL that downloads `key` under its own name (ObjectNotFound if it is absent)."""
    validate_key(key)
    config = bucket_config(bucket=bucket)
    objects.head_object(config, bucket=bucket.name, key=key)
    return presign.presign_get(config, bucket=bucket.name, key=key, expires_in=URL_LIFETIME_S)


def upload_url(*, bucket: Bucket, key: str, content_type: str = "") -> str:
    """A single-PUT upload URL (small files; the client sends `content_type` if given)."""
    validate_key(key)
    return presign.presign_put(
        bucket_config(bucket=bucket),
        bucket=bucket.name,
        key=key,
        expires_in=URL_LIFETIME_S,
        content_type=content_type or None,
    )


def upload_start(
    *, bucket: Bucket, key: str, size: int, content_type: str = "", part_size: int | None = None
) -> UploadPlan:
    """Start a multipart upload of `size` bytes; parts are 16 MiB unless asked otherwise
    (at least 5 MiB: a smaller part size is raised; at most 5 GiB: a bigger one is refused;
    at most 10,000 parts)."""
    validate_key(key)
    if size > settings.UPLOAD_MAX_BYTES:
        raise ValidationError({"size": f"An upload holds at most {_limit()} on this panel."})
    if part_size is not None and part_size > presign.MAX_PART_SIZE:
        raise ValidationError(
            {"part_size": f"A part holds at most 5 GiB ({presign.MAX_PART_SIZE} bytes)."}
        )
    try:
        plan = presign.plan_parts(size=size, part_size=part_size or presign.DEFAULT_PART_SIZE)
    except ValueError as error:
        raise ValidationError({"size": str(error)}) from None
    upload_id = presign.create_multipart_upload(
        bucket_config(bucket=bucket),
        bucket=bucket.name,
        key=key,
        content_type=content_type or None,
    )
    return UploadPlan(
        key=key, upload_id=upload_id, part_size=plan.part_size, part_count=plan.part_count
    )


def upload_parts(
    *, bucket: Bucket, key: str, upload_id: str, part_numbers: Iterable[int]
) -> list[presign.PresignedPart]:
    """PUT URLs for some parts (up to 1,000 per call: clients ask as they go)."""
    validate_key(key)
    numbers = list(part_numbers)
    if not numbers or len(numbers) > MAX_PARTS_PER_REQUEST:
        raise ValidationError(
            {"part_numbers": f"Ask for 1 to {MAX_PARTS_PER_REQUEST} parts at a time."}
        )
    try:
        return presign.presign_upload_parts(
            bucket_config(bucket=bucket),
            bucket=bucket.name,
            key=key,
            upload_id=upload_id,
            part_numbers=numbers,
            expires_in=URL_LIFETIME_S,
        )
    except ValueError as error:
        raise ValidationError({"part_numbers": str(error)}) from None


def upload_complete(
    *, bucket: Bucket, key: str, upload_id: str, parts: Sequence[presign.CompletedPart]
) -> str:
    """Assemble the parts into the object; return its ETag."""
    validate_key(key)
    if not parts:
        raise ValidationError({"parts": "List the uploaded parts with their ETags."})
    config = bucket_config(bucket=bucket)
    etag = presign.complete_multipart_upload(
        config,
        bucket=bucket.name,
        key=key,
        upload_id=upload_id,
        parts=parts,
    )
    # The size the upload started with is the client's word: what was assembled is checked
    # (ListParts first would be better, but not every S3 server has it; s3rver has not).
    made = objects.head_object(config, bucket=bucket.name, key=key)
    if made.size > settings.UPLOAD_MAX_BYTES:
        objects.delete_object(config, bucket=bucket.name, key=key)
        bucket_stats_request(bucket=bucket)
        raise ValidationError(
            {
                "parts": f"The parts hold {made.size} bytes, more than {_limit()}, the most an "
                "upload may hold on this panel: the object is deleted."
            }
        )
    bucket_stats_request(bucket=bucket)
    return etag


def _limit() -> str:
    gib = settings.UPLOAD_MAX_BYTES / 1024**3
    return f"{gib:g} GiB" if gib >= 1 else f"{settings.UPLOAD_MAX_BYTES} bytes"


def upload_abort(*, bucket: Bucket, key: str, upload_id: str) -> None:
    """Cancel an upload; the store drops the parts already sent."""
    validate_key(key)
    presign.abort_multipart_upload(
        bucket_config(bucket=bucket), bucket=bucket.name, key=key, upload_id=upload_id
    )


def upload_done(*, bucket: Bucket) -> None:
    """A single-PUT upload finished (the client says so): refresh the usage figures."""
    bucket_stats_request(bucket=bucket)
