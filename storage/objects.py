"""Bucket and object operations the panel uses: plain dataclasses in and out, StorageError out.

Every function takes the datastore's `DatastoreConfig` first and keyword arguments after it;
the shared client comes from `storage.client`. Presigned URLs and multipart uploads live in
`storage.presign`; a bucket's CORS rules in `storage.cors` (its three calls re-exported here).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from storage.client import make_s3_client
from storage.cors import add_bucket_cors as add_bucket_cors  # re-exported: callers use objects.*
from storage.cors import remove_bucket_cors as remove_bucket_cors
from storage.cors import set_bucket_cors as set_bucket_cors
from storage.datastore import DatastoreConfig
from storage.errors import (
    AccessDenied,
    BucketAlreadyExists,
    BucketNotFound,
    ObjectNotFound,
    StorageError,
    s3_errors,
)
from storage.names import validate_bucket_name

DELETE_BATCH = 1000  # the most keys one DeleteObjects request may carry
MAX_PAGE_SIZE = 1000  # the most keys one ListObjectsV2 page returns

ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class ObjectInfo:
    """One object: `etag` without its quotes; `content_type` is "" in listings (HEAD only)."""

    key: str
    size: int
    last_modified: datetime
    etag: str
    content_type: str = ""


@dataclass(frozen=True)
class ListPage:
    """One page of a folder-like listing: sub-folders (each ending with the delimiter), the
    objects at this level, and the token of the next page (None on the last page)."""

    prefixes: list[str]
    objects: list[ObjectInfo]
    next_token: str | None


@dataclass(frozen=True)
class BucketInfo:
    """A bucket the datastore's credentials can see."""

    name: str
    created: datetime | None


@dataclass(frozen=True)
class BucketStats:
    """Object count and total size in bytes under a bucket (or a prefix of it)."""

    object_count: int
    total_size: int


@dataclass(frozen=True)
class ObjectError:
    """One key a batch operation could not handle, with the S3 error code and message."""

    key: str
    code: str
    message: str


@dataclass(frozen=True)
class DeleteResult:
    """Outcome of deleting many keys: what went and what did not."""

    deleted: list[str]
    errors: list[ObjectError]


def list_buckets(config: DatastoreConfig) -> list[BucketInfo]:
    """Every bucket the credentials can list, by name."""
    with s3_errors():
        response = make_s3_client(config).list_buckets()
    buckets = [
        BucketInfo(name=b["Name"], created=b.get("CreationDate")) for b in response["Buckets"]
    ]
    return sorted(buckets, key=lambda bucket: bucket.name)


def create_bucket(
    config: DatastoreConfig, *, bucket: str, cors_origins: Iterable[str] = ()
) -> None:
    """Create `bucket` (BucketNameError for a bad name); allow browser uploads from the
    origins in `cors_origins` when given."""
    validate_bucket_name(bucket)
    # S3 in us-east-1 answers 200 to creating a bucket these credentials already own (moto
    # too), where s3rver, MinIO and other regions say BucketAlreadyOwnedByYou: look first, so
    # an existing bucket (another project's data) is never taken for a new, empty one. A 403
    # (someone else's bucket, or wrong keys) is left for the create to tell apart.
    with contextlib.suppress(AccessDenied):
        if bucket_exists(config, bucket=bucket):
            raise BucketAlreadyExists(f"BucketAlreadyExists: {bucket}", code="BucketAlreadyExists")
    params: dict[str, Any] = {"Bucket": bucket}
    if config.region and config.region != "us-east-1":
        # Outside us-east-1, S3 (and MinIO with a region set) insist on a matching constraint.
        params["CreateBucketConfiguration"] = {"LocationConstraint": config.region}
    with s3_errors(bucket=bucket):
        make_s3_client(config).create_bucket(**params)
    origins = list(cors_origins)
    if origins:
        set_bucket_cors(config, bucket=bucket, origins=origins)


def delete_bucket(
    config: DatastoreConfig,
    *,
    bucket: str,
    force: bool = False,
    on_progress: ProgressCallback | None = None,
) -> int:
    """Delete `bucket`; raise BucketNotEmpty if it holds objects, unless `force`, which first
    deletes them all (`on_progress` gets the running count). Returns how many were deleted."""
    deleted = empty_bucket(config, bucket=bucket, on_progress=on_progress) if force else 0
    with s3_errors(bucket=bucket):
        make_s3_client(config).delete_bucket(Bucket=bucket)
    return deleted


def empty_bucket(
    config: DatastoreConfig, *, bucket: str, on_progress: ProgressCallback | None = None
) -> int:
    """Delete every object of `bucket` in batches of 1,000; return how many were deleted."""
    keys = (info.key for info in iter_objects(config, bucket=bucket))
    result = delete_objects(config, bucket=bucket, keys=keys, on_progress=on_progress)
    if result.errors:
        first = result.errors[0]
        raise StorageError(
            f"{len(result.errors)} objects could not be deleted from {bucket}, "
            f"e.g. {first.key!r}: {first.code} {first.message}",
            code=first.code,
        )
    _abort_uploads(config, bucket=bucket)
    return len(result.deleted)


def _abort_uploads(config: DatastoreConfig, *, bucket: str) -> None:
    """Abort unfinished multipart uploads, which would otherwise keep a bucket busy."""
    client = make_s3_client(config)
    try:
        uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    except ClientError:
        return  # not implemented by every server (s3rver): nothing we can abort there
    for upload in uploads:
        with s3_errors(bucket=bucket, key=upload["Key"]):
            client.abort_multipart_upload(
                Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
            )


def head_bucket(config: DatastoreConfig, *, bucket: str) -> None:
    """Check that `bucket` exists and the credentials may use it: BucketNotFound,
    AccessDenied or StorageUnavailable otherwise."""
    with s3_errors(bucket=bucket):
        make_s3_client(config).head_bucket(Bucket=bucket)


def bucket_exists(config: DatastoreConfig, *, bucket: str) -> bool:
    """True if `bucket` exists and is usable, False if it does not exist; AccessDenied when
    it exists but the credentials may not use it."""
    try:
        head_bucket(config, bucket=bucket)
    except BucketNotFound:
        return False
    return True


def bucket_stats(config: DatastoreConfig, *, bucket: str, prefix: str = "") -> BucketStats:
    """Count objects and bytes by streaming the listing (1,000 keys per request)."""
    count = size = 0
    for info in iter_objects(config, bucket=bucket, prefix=prefix):
        count += 1
        size += info.size
    return BucketStats(object_count=count, total_size=size)


def list_objects(
    config: DatastoreConfig,
    *,
    bucket: str,
    prefix: str = "",
    delimiter: str = "/",
    page_size: int = MAX_PAGE_SIZE,
    token: str | None = None,
) -> ListPage:
    """One page of the objects under `prefix`, folded into sub-folders at `delimiter`
    ("" lists every key flat). Pass `next_token` back as `token` for the next page."""
    params: dict[str, Any] = {
        "Bucket": bucket,
        "Prefix": prefix,
        "MaxKeys": max(1, min(page_size, MAX_PAGE_SIZE)),
    }
    if delimiter:
        params["Delimiter"] = delimiter
    if token:
        params["ContinuationToken"] = token
    with s3_errors(bucket=bucket):
        response = make_s3_client(config).list_objects_v2(**params)
    return ListPage(
        prefixes=[entry["Prefix"] for entry in response.get("CommonPrefixes", [])],
        objects=[_object_info(entry) for entry in response.get("Contents", [])],
        next_token=response.get("NextContinuationToken") if response.get("IsTruncated") else None,
    )


def iter_objects(config: DatastoreConfig, *, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
    """Every object under `prefix`, in key order, one listing page at a time."""
    token: str | None = None
    while True:
        page = list_objects(config, bucket=bucket, prefix=prefix, delimiter="", token=token)
        yield from page.objects
        if page.next_token is None:
            return
        token = page.next_token


def head_object(config: DatastoreConfig, *, bucket: str, key: str) -> ObjectInfo:
    """Size, date, ETag and content type of one object (ObjectNotFound if absent)."""
    with s3_errors(bucket=bucket, key=key):
        response = make_s3_client(config).head_object(Bucket=bucket, Key=key)
    return ObjectInfo(
        key=key,
        size=response["ContentLength"],
        last_modified=response["LastModified"],
        etag=response["ETag"].strip('"'),
        content_type=response.get("ContentType", ""),
    )


def object_exists(config: DatastoreConfig, *, bucket: str, key: str) -> bool:
    """True if `key` exists in `bucket`."""
    try:
        head_object(config, bucket=bucket, key=key)
    except ObjectNotFound:
        return False
    return True


def put_object(
    config: DatastoreConfig, *, bucket: str, key: str, data: bytes, content_type: str = ""
) -> str:
    """Store a small object in one request; return its ETag (files go through storage.sync)."""
    params: dict[str, Any] = {"Bucket": bucket, "Key": key, "Body": data}
    if content_type:
        params["ContentType"] = content_type
    with s3_errors(bucket=bucket, key=key):
        response = make_s3_client(config).put_object(**params)
    return str(response["ETag"]).strip('"')


def read_object(config: DatastoreConfig, *, bucket: str, key: str, max_bytes: int) -> bytes:
    """The content of a small object; StorageError if it is larger than `max_bytes`."""
    with s3_errors(bucket=bucket, key=key):
        response = make_s3_client(config).get_object(Bucket=bucket, Key=key)
        body = response["Body"]
        try:
            data = body.read(max_bytes + 1)
        finally:
            body.close()
    if len(data) > max_bytes:
        raise StorageError(f"{bucket}/{key} is larger than {max_bytes} bytes")
    return data


def copy_object(
    config: DatastoreConfig,
    *,
    bucket: str,
    source_key: str,
    dest_key: str,
    source_bucket: str | None = None,
) -> None:
    """Server-side copy of one object (up to 5 GB, S3's single-request limit)."""
    source = {"Bucket": source_bucket or bucket, "Key": source_key}
    with s3_errors(bucket=bucket, key=dest_key):
        make_s3_client(config).copy_object(Bucket=bucket, Key=dest_key, CopySource=source)


def delete_object(config: DatastoreConfig, *, bucket: str, key: str) -> None:
    """Delete one object (deleting a missing key succeeds, as in S3)."""
    with s3_errors(bucket=bucket, key=key):
        make_s3_client(config).delete_object(Bucket=bucket, Key=key)


def delete_objects(
    config: DatastoreConfig,
    *,
    bucket: str,
    keys: Iterable[str],
    on_progress: ProgressCallback | None = None,
) -> DeleteResult:
    """Delete many keys, 1,000 per request; `on_progress` gets the running count deleted."""
    deleted: list[str] = []
    errors: list[ObjectError] = []
    batch: list[str] = []
    for key in keys:
        batch.append(key)
        if len(batch) == DELETE_BATCH:
            _delete_batch(config, bucket, batch, deleted, errors, on_progress)
            batch = []
    if batch:
        _delete_batch(config, bucket, batch, deleted, errors, on_progress)
    return DeleteResult(deleted=deleted, errors=errors)


def _delete_batch(
    config: DatastoreConfig,
    bucket: str,
    batch: list[str],
    deleted: list[str],
    errors: list[ObjectError],
    on_progress: ProgressCallback | None,
) -> None:
    for key in [key for key in batch if _NOT_IN_XML.search(key)]:
        _delete_one(config, bucket, key, deleted, errors)
    batch = [key for key in batch if not _NOT_IN_XML.search(key)]
    if batch:
        request = {"Objects": [{"Key": key} for key in batch], "Quiet": True}
        with s3_errors(bucket=bucket):
            response = make_s3_client(config).delete_objects(Bucket=bucket, Delete=request)
        failed = {entry["Key"] for entry in response.get("Errors", [])}
        errors.extend(
            ObjectError(entry["Key"], entry.get("Code", ""), entry.get("Message", ""))
            for entry in response.get("Errors", [])
        )
        # Quiet mode reports only failures: every other key of the batch is gone.
        deleted.extend(key for key in batch if key not in failed)
    if on_progress is not None:
        on_progress(len(deleted))


# Characters XML 1.0 cannot carry: a DeleteObjects body naming such a key is malformed (S3
# answers MalformedXML, moto 500), so those keys go one request each, named in the URL.
_NOT_IN_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _delete_one(
    config: DatastoreConfig, bucket: str, key: str, deleted: list[str], errors: list[ObjectError]
) -> None:
    try:
        delete_object(config, bucket=bucket, key=key)
    except StorageError as error:
        errors.append(ObjectError(key=key, code=error.code, message=error.message))
    else:
        deleted.append(key)


def _object_info(entry: dict[str, Any]) -> ObjectInfo:
    return ObjectInfo(
        key=entry["Key"],
        size=int(entry["Size"]),
        last_modified=entry["LastModified"],
        etag=str(entry.get("ETag", "")).strip('"'),
    )
