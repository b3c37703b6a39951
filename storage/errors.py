"""Storage errors the panel can act on, translated from botocore's so callers never import it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError


class StorageError(Exception):
    """Any failure talking to a datastore; `code` is the S3 error code when there is one."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class BucketNotFound(StorageError):
    """The bucket does not exist on this datastore."""


class BucketAlreadyExists(StorageError):
    """Creating a bucket whose name is taken (by us or, on a shared endpoint, by anyone)."""


class BucketNotEmpty(StorageError):
    """Deleting a bucket that still holds objects (pass force=True to empty it first)."""


class ObjectNotFound(StorageError):
    """The key does not exist in the bucket."""


class UploadNotFound(StorageError):
    """The multipart upload id is unknown: made up, or already completed or aborted."""


class InvalidPart(StorageError):
    """Completing an upload with a part that was never uploaded, a wrong ETag, parts out of
    order, or a part under 5 MiB that is not the last."""


class AccessDenied(StorageError):
    """The datastore's credentials do not allow this operation (or are wrong)."""


class StorageUnavailable(StorageError):
    """The endpoint did not answer (down, unreachable, timed out) after retries."""


_BY_CODE: dict[str, type[StorageError]] = {
    "NoSuchBucket": BucketNotFound,
    "BucketAlreadyExists": BucketAlreadyExists,
    "BucketAlreadyOwnedByYou": BucketAlreadyExists,
    "BucketNotEmpty": BucketNotEmpty,
    "NoSuchKey": ObjectNotFound,
    "NoSuchUpload": UploadNotFound,
    "InvalidPart": InvalidPart,
    "InvalidPartOrder": InvalidPart,
    "EntityTooSmall": InvalidPart,
    "AccessDenied": AccessDenied,
    "InvalidAccessKeyId": AccessDenied,
    "SignatureDoesNotMatch": AccessDenied,
    "403": AccessDenied,
}


def translate(error: Exception, *, bucket: str = "", key: str = "") -> StorageError:
    """The StorageError for a botocore exception (HEAD answers carry only a status code)."""
    if isinstance(error, StorageError):
        return error
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("404", "NotFound"):
            code = "NoSuchKey" if key else "NoSuchBucket"
        kind = _BY_CODE.get(code) or (AccessDenied if status == 403 else StorageError)
        where = f"{bucket}/{key}" if key else bucket
        message = error.response.get("Error", {}).get("Message") or code
        return kind(f"{code}: {message} ({where})" if where else f"{code}: {message}", code=code)
    if isinstance(error, BotoConnectionError | HTTPClientError):
        return StorageUnavailable(str(error), code=type(error).__name__)
    if isinstance(error, BotoCoreError):
        return StorageError(str(error), code=type(error).__name__)
    return StorageError(str(error))


@contextmanager
def s3_errors(*, bucket: str = "", key: str = "") -> Iterator[None]:
    """Re-raise botocore exceptions inside the block as StorageError subclasses."""
    try:
        yield
    except (ClientError, BotoCoreError) as error:
        raise translate(error, bucket=bucket, key=key) from error
