"""Writes: datastores, bucket create / attach / delete, object deletion (the usage recounts are
usage.py, imported here too).

Storage failures the user can act on become ValidationError (with the field they concern);
StorageUnavailable and other StorageError propagate, for the view to answer 502/503.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlpanel import audit
from controlpanel.buckets.models import Bucket, BucketGrant, BucketState, Datastore, Origin
from controlpanel.buckets.selectors import (
    DatastoreNotFound,
    bucket_config,
    datastore_config,
    default_datastore_alias,
)
from controlpanel.buckets.usage import (  # noqa: F401 (the usage recounts, imported from here)
    STATS_PENDING_TTL_S,
    bucket_refresh_stats,
    bucket_stats_recount,
    bucket_stats_request,
    buckets_recount_written,
)
from controlpanel.projects.access import ProjectAccess
from storage import objects
from storage.datastore import DatastoreConfig, env_prefix
from storage.errors import AccessDenied, BucketAlreadyExists, BucketNotFound, StorageError
from storage.errors import BucketNotEmpty as S3BucketNotEmpty
from storage.names import AliasError, BucketNameError, validate_alias, validate_bucket_name

log = logging.getLogger(__name__)

MAX_PREFIX_DELETE = 10_000  # a bigger folder is deleted through the API/CLI in batches


class BucketNotGranted(PermissionDenied):
    """Attaching an existing bucket no admin granted to the project."""

    def __init__(self, *, bucket: str, alias: str, project: str) -> None:
        super().__init__(
            f"Attaching an existing bucket needs an admin's grant: ask an admin to grant "
            f"{bucket} on {alias} to the project {project}."
        )


class BucketNotEmptyError(Exception):
    """Deleting a bucket that still holds objects without confirming it should be emptied."""

    def __init__(self, bucket: Bucket) -> None:
        super().__init__(
            f"{bucket.name} is not empty: confirm that its objects should be deleted too"
        )
        self.bucket = bucket


def datastore_create(
    *,
    by: Any,
    alias: str,
    endpoint_url: str,
    region: str = "us-east-1",
    access_key: str,
    secret_key: str,
    public_endpoint_url: str = "",
) -> Datastore:
    """Site admins add datastores; the default one's alias (S3_ALIAS) stays reserved."""
    if not by.is_staff:
        raise PermissionDenied("Only site admins can add datastores.")
    datastore_alias_check(alias=alias)
    datastore = Datastore(
        alias=alias,
        endpoint_url=endpoint_url.rstrip("/"),
        public_endpoint_url=public_endpoint_url.rstrip("/"),
        region=region,
        access_key=access_key,
        secret_key=secret_key,
    )
    datastore.full_clean()
    datastore.save()
    return datastore


def datastore_alias_check(*, alias: str, datastore_id: int | None = None) -> None:
    """Refuse an alias that is taken, or that would share its pod environment variables
    (`AJUSTE_DATASTORE_<ALIAS>_*`: upper-cased, '-' as '_') with the default datastore or
    another one (GRA and gra both give AJUSTE_DATASTORE_GRA_*, G-RA and G_RA both
    AJUSTE_DATASTORE_G_RA_*).
    `datastore_id`: the datastore being edited, which may keep its alias."""
    try:
        validate_alias(alias)
    except AliasError:
        return  # the model field's validator says what is wrong with it
    prefix = env_prefix(alias)
    if settings.S3_ENDPOINT_URL and env_prefix(settings.S3_ALIAS) == prefix:
        _alias_clash(alias, settings.S3_ALIAS, default=True)
    others = Datastore.objects.exclude(pk=datastore_id) if datastore_id else Datastore.objects
    for other in others.values_list("alias", flat=True):
        if env_prefix(other) == prefix:
            _alias_clash(alias, other, default=False)


def _alias_clash(alias: str, other: str, *, default: bool) -> None:
    """Refuse `alias`: it is `other`, or shares its pod environment variables."""
    if alias == other:
        taken = f"{alias} is the default datastore (S3_ALIAS)."
        raise ValidationError(
            {"alias": taken if default else f"A datastore named {alias} already exists."}
        )
    whose = f"the default datastore {other} (S3_ALIAS)" if default else f"the datastore {other}"
    raise ValidationError(
        {
            "alias": f"{alias} would share the environment variables {env_prefix(alias)}* with "
            f"{whose}: choose an alias that differs by more than case or '-' and '_'."
        }
    )


def _resolve(datastore: str | None) -> tuple[str, DatastoreConfig]:
    alias = datastore or default_datastore_alias()
    if not alias:
        raise ValidationError({"datastore": "No datastore is configured; ask an admin."})
    try:
        return alias, datastore_config(alias)
    except DatastoreNotFound as error:
        raise ValidationError({"datastore": f"No datastore is named {alias!r}."}) from error


def _check_name(name: str) -> None:
    try:
        validate_bucket_name(name)
    except BucketNameError as error:
        raise ValidationError({"name": error.message}) from None


def _cors_origins() -> list[str]:
    """S3_CORS_ORIGINS, with 127.0.0.1 and localhost standing in for each other (make run)."""
    origins: list[str] = []
    for origin in settings.S3_CORS_ORIGINS:
        parts = urlsplit(origin)
        base = f"{parts.scheme}://{parts.netloc}" if parts.netloc else origin
        origins.append(base)
        for a, b in (("127.0.0.1", "localhost"), ("localhost", "127.0.0.1")):
            if parts.hostname == a:
                origins.append(base.replace(a, b, 1))
    return list(dict.fromkeys(origins))


def bucket_create(
    *, access: ProjectAccess, by: Any, name: str, datastore: str | None = None
) -> Bucket:
    """Create `name` on the datastore (default: S3_ALIAS) for the project."""
    _check_name(name)
    alias, config = _resolve(datastore)
    try:
        with transaction.atomic():
            bucket = Bucket.objects.create(
                project=access.project,
                datastore=alias,
                name=name,
                origin=Origin.CREATED,
                created_by=by,
                object_count=0,
                total_size=0,
                stats_at=timezone.now(),
            )
            objects.create_bucket(config, bucket=name)
    except IntegrityError:
        raise ValidationError({"name": f"{name} is already in use on {alias}."}) from None
    except BucketAlreadyExists:
        taken = (
            f"A bucket named {name} already exists on {alias} (names are shared by everyone "
            "on a datastore): choose another name, or attach it if it is yours."
        )
        raise ValidationError({"name": taken}) from None
    audit.record("bucket.create", actor=by, project=access.project, target=bucket, name=name)
    _allow_browser_uploads(config, bucket)
    return bucket


def _allow_browser_uploads(config: DatastoreConfig, bucket: Bucket) -> None:
    """Add the CORS rule browser uploads need to the rules the bucket has (never replacing
    them: even a bucket just created may be one that existed, on a server that answers 200
    to creating a bucket these keys own), and remember the rule added, for a detach to take
    back. A refusal is kept on the row for the object browser to explain: the bucket is
    usable without it (API, CLI, boto3)."""
    origins = _cors_origins()
    if not origins:
        return
    try:
        if objects.add_bucket_cors(config, bucket=bucket.name, origins=origins):
            bucket.cors_origins_added = origins
            Bucket.objects.filter(pk=bucket.pk).update(cors_origins_added=origins)
    except StorageError as error:
        log.warning("could not set CORS on %s@%s: %s", bucket.name, config.alias, error.code)
        reason = error.code or error.message
        bucket.cors_error = (
            f"The datastore refused to set the CORS rule browser uploads need ({reason}): "
            f"allow GET, PUT and HEAD from {', '.join(origins)} with the ETag header exposed."
        )[:500]
        Bucket.objects.filter(pk=bucket.pk).update(cors_error=bucket.cors_error)


def bucket_attach(
    *, access: ProjectAccess, by: Any, name: str, datastore: str | None = None
) -> Bucket:
    """Attach an existing bucket an admin granted to the project (a site admin may attach
    any), once the datastore's credentials are seen to reach it.

    The grant is checked first: the shared keys reach every bucket of the datastore, so
    reaching one proves nothing about whose it is, and a member without a grant learns
    nothing about which buckets exist."""
    _check_name(name)
    alias, config = _resolve(datastore)
    _check_grant(access=access, alias=alias, name=name)
    if Bucket.objects.filter(datastore=alias, name=name).exists():
        raise ValidationError({"name": f"{name} is already attached to a project on {alias}."})
    try:
        objects.head_bucket(config, bucket=name)
    except BucketNotFound:
        raise ValidationError({"name": f"There is no bucket named {name} on {alias}."}) from None
    except AccessDenied:
        raise ValidationError(
            {"name": f"The credentials of {alias} are not allowed to use {name}."}
        ) from None
    try:
        bucket = Bucket.objects.create(
            project=access.project,
            datastore=alias,
            name=name,
            origin=Origin.ATTACHED,
            created_by=by,
        )
    except IntegrityError:
        raise ValidationError({"name": f"{name} is already attached to a project."}) from None
    audit.record("bucket.attach", actor=by, project=access.project, target=bucket, name=name)
    _allow_browser_uploads(config, bucket)
    bucket_stats_request(bucket=bucket)
    return bucket


def _check_grant(*, access: ProjectAccess, alias: str, name: str) -> None:
    if access.is_admin:
        return  # a site admin attaching it is the admin's say
    granted = BucketGrant.objects.filter(datastore=alias, name=name, project=access.project)
    if not granted.exists():
        raise BucketNotGranted(bucket=name, alias=alias, project=access.project.slug)


def bucket_delete(*, access: ProjectAccess, bucket: Bucket, empty: bool = False) -> bool:
    """Delete a created bucket (attached ones are only detached: their data stays).

    A bucket that holds objects raises BucketNotEmptyError unless `empty`, which starts a
    task that deletes them all, then the bucket (progress on the row). Returns True when
    the bucket is gone now, False when the task was started."""
    if bucket.project_id != access.project.pk:
        raise PermissionDenied("Not this project's bucket.")
    if bucket.origin == Origin.ATTACHED:
        _take_back_cors(bucket)
        audit.record(
            "bucket.delete", actor=None, project=access.project, target=bucket, name=bucket.name
        )
        bucket.delete()
        return True
    if bucket.is_busy:
        raise ValidationError("This bucket is already being emptied.")
    config = bucket_config(bucket=bucket)
    has_objects = bool(
        objects.list_objects(config, bucket=bucket.name, delimiter="", page_size=1).objects
    )
    if has_objects and not empty:
        raise BucketNotEmptyError(bucket)
    if has_objects:
        _start_emptying(bucket)
        audit.record(
            "bucket.delete",
            actor=None,
            project=access.project,
            target=bucket,
            name=bucket.name,
            emptying=True,
        )
        return False
    try:
        objects.delete_bucket(config, bucket=bucket.name)
    except BucketNotFound:
        pass  # deleted behind our back: forgetting it is all that is left
    except S3BucketNotEmpty:
        raise BucketNotEmptyError(bucket) from None
    audit.record(
        "bucket.delete", actor=None, project=access.project, target=bucket, name=bucket.name
    )
    bucket.delete()
    return True


def _take_back_cors(bucket: Bucket) -> None:
    """Remove the CORS rule Ajuste added to a bucket it is detaching, and only that rule. A
    failure is logged, not raised: the rule left behind lets our origins use presigned URLs,
    which only the keys can sign, and the detach must not be held by the datastore."""
    if not bucket.cors_origins_added:
        return
    try:
        objects.remove_bucket_cors(
            bucket_config(bucket=bucket), bucket=bucket.name, origins=bucket.cors_origins_added
        )
    except (StorageError, DatastoreNotFound) as error:
        log.warning("could not remove our CORS rule from %s: %s", bucket, error)


def _start_emptying(bucket: Bucket) -> None:
    from controlpanel.buckets.tasks import empty_and_delete_bucket

    claimed = Bucket.objects.filter(
        pk=bucket.pk, state__in=[BucketState.READY, BucketState.FAILED]
    ).update(state=BucketState.EMPTYING, empty_done=0, empty_total=None, state_message="")
    if not claimed:
        raise ValidationError("This bucket is already being emptied.")
    bucket.refresh_from_db()
    empty_and_delete_bucket.delay_on_commit(bucket.pk)


def bucket_empty_and_delete(*, bucket_id: int) -> None:
    """The task's body: count, delete every object (progress on the row), delete the
    bucket, forget it. A failure is kept on the row (state FAILED) for the page to show."""
    bucket = Bucket.objects.filter(pk=bucket_id, state=BucketState.EMPTYING).first()
    if bucket is None:
        return
    config = bucket_config(bucket=bucket)

    def progress(done: int) -> None:  # once per batch of 1,000 deletions
        Bucket.objects.filter(pk=bucket_id).update(empty_done=done)

    try:
        total = objects.bucket_stats(config, bucket=bucket.name).object_count
        Bucket.objects.filter(pk=bucket_id).update(empty_total=total)
        objects.delete_bucket(config, bucket=bucket.name, force=True, on_progress=progress)
    except BucketNotFound:
        pass
    except StorageError as error:
        Bucket.objects.filter(pk=bucket_id).update(
            state=BucketState.FAILED, state_message=error.message[:1000]
        )
        return
    Bucket.objects.filter(pk=bucket_id).delete()


def objects_delete(
    *, bucket: Bucket, keys: Sequence[str], prefixes: Sequence[str] = ()
) -> objects.DeleteResult:
    """Delete `keys`, and every object under each of `prefixes` (folders, up to 10,000
    objects in all: bigger folders go through the API or the CLI in batches). A folder
    prefix gets its '/' if it lacks one: `runs/1` is the folder, never `runs/10/...` or
    `runs/1-old.txt`."""
    config = bucket_config(bucket=bucket)
    wanted = list(dict.fromkeys(keys))
    for folder in prefixes:
        if not folder:
            raise ValidationError("Delete the bucket to delete everything in it.")
        prefix = folder if folder.endswith("/") else folder + "/"
        for info in objects.iter_objects(config, bucket=bucket.name, prefix=prefix):
            wanted.append(info.key)
            if len(wanted) > MAX_PREFIX_DELETE:
                raise ValidationError(
                    f"More than {MAX_PREFIX_DELETE} objects selected: delete big folders with "
                    "`ajuste bucket object delete --recursive`."
                )
    result = objects.delete_objects(config, bucket=bucket.name, keys=wanted)
    bucket_stats_request(bucket=bucket)
    return result
