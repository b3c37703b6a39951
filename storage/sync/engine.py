"""pull() and push(): the rules are in the package docstring (storage/sync/__init__.py)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from boto3.s3.transfer import TransferConfig
from botocore.client import BaseClient
from botocore.exceptions import BotoCoreError, ClientError

from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.errors import StorageError, translate
from storage.objects import ObjectInfo, delete_objects, iter_objects
from storage.sync.local import (
    MAX_KEY_BYTES,
    PART_SIZE,
    PARTIAL_PREFIX,
    PARTIAL_SUFFIX,
    HashCache,
    LocalFile,
    LocalScan,
    UnsafeKeyError,
    local_path,
    same_content,
    scan,
)
from storage.sync.stats import ProgressCallback, SyncStats, Tracker
from storage.volumes import Mode, VolumeSpec

MiB = 1024 * 1024
# Up to this size a file moves in one request, read into memory and checked against its MD5.
SINGLE_REQUEST_LIMIT = 8 * MiB
# A local file newer than the object by more than this is kept by pull (clock slack).
NEWER_LOCAL_SLACK_S = 2.0
DEFAULT_WORKERS = 8
MAX_PARTS_IN_FLIGHT = 40  # stays under the client's 64 pooled connections

_hashes = HashCache()  # shared by every sync of the process, so periodic pushes hash once
T = TypeVar("T")


class IntegrityError(Exception):
    """The bytes moved do not match the ETag the store reports."""


@dataclass(frozen=True)
class _Sync:
    """What every file task of one pull or push needs."""

    client: BaseClient
    bucket: str
    prefix: str  # the key prefix of the volume, "" or ending with '/'
    root: Path
    tracker: Tracker
    transfer: TransferConfig


def key_prefix(spec: VolumeSpec) -> str:
    """The key prefix of a volume: "" for a whole bucket, else the prefix and '/'."""
    return f"{spec.prefix}/" if spec.prefix else ""


def transfer_config(workers: int, large_files: int) -> TransferConfig:
    """boto3 settings for large files: 16 MiB parts; about 40 parts in flight in all, shared
    by the large files that can move at once (10 for a lone file, as boto3's default)."""
    at_once = max(1, min(workers, large_files))
    return TransferConfig(
        multipart_threshold=SINGLE_REQUEST_LIMIT,
        multipart_chunksize=PART_SIZE,
        max_concurrency=max(2, min(10, MAX_PARTS_IN_FLIGHT // at_once)),
        use_threads=True,
    )


def pull(
    config: DatastoreConfig,
    spec: VolumeSpec,
    local_dir: Path | str,
    *,
    workers: int = DEFAULT_WORKERS,
    progress: ProgressCallback | None = None,
) -> SyncStats:
    """Download the volume's objects into `local_dir` (created if needed); never deletes a
    local file."""
    sync = _start("pull", config, spec, local_dir, workers, progress)
    try:
        sync.root.mkdir(parents=True, exist_ok=True)
        remote = list(iter_objects(config, bucket=spec.bucket, prefix=sync.prefix))
    except (OSError, StorageError) as error:
        sync.tracker.failed(_where(spec), _describe(error), counts_as_file=False)
        return sync.tracker.finish()
    files = [obj for obj in remote if _is_file_key(obj.key, sync)]
    large = sum(1 for obj in files if obj.size > SINGLE_REQUEST_LIMIT)
    sync = replace(sync, transfer=transfer_config(workers, large))
    _make_folders(sync, [obj.key for obj in remote if not _is_file_key(obj.key, sync)])
    sync.tracker.add_total(len(files))
    _run(workers, lambda obj: _pull_one(sync, obj), files)
    return sync.tracker.finish()


def push(
    config: DatastoreConfig,
    spec: VolumeSpec,
    local_dir: Path | str,
    *,
    delete: bool | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: ProgressCallback | None = None,
) -> SyncStats:
    """Upload new and changed files of `local_dir` to the volume. `delete` (default: the spec
    is `rwd`) also removes remote objects absent locally, unless the local scan was
    incomplete. A read-only spec is refused (ValueError)."""
    if spec.mode is Mode.RO:
        raise ValueError(f"volume {spec.bucket}@{spec.alias} is read-only: it is never pushed")
    sync = _start("push", config, spec, local_dir, workers, progress)
    local = _scan_local(sync)
    remote = _list_remote(config, spec, sync) if local is not None else None
    if local is None or remote is None:
        return sync.tracker.finish()
    large = sum(1 for file in local.files.values() if file.stat.st_size > SINGLE_REQUEST_LIMIT)
    sync = replace(sync, transfer=transfer_config(workers, large))
    sync.tracker.add_total(len(local.files) + len(local.symlinks))
    for _ in local.symlinks:
        sync.tracker.skipped()  # never followed: a link could point anywhere on this machine
    _run(
        workers,
        lambda file: _push_one(sync, file, remote.get(sync.prefix + file.relative)),
        local.files.values(),
    )
    mirror_deletions = spec.mode is Mode.RWD if delete is None else delete
    if mirror_deletions:
        _delete_absent(config, sync, local, remote)
    return sync.tracker.finish()


def _scan_local(sync: _Sync) -> LocalScan | None:
    """The local files, or None (and a failure) when the directory is missing."""
    if not sync.root.is_dir():
        sync.tracker.failed(str(sync.root), "local directory does not exist", counts_as_file=False)
        return None
    local = scan(sync.root)
    for failure in local.errors:
        sync.tracker.failed(failure.key, failure.error, counts_as_file=False)
    return local


def _list_remote(
    config: DatastoreConfig, spec: VolumeSpec, sync: _Sync
) -> dict[str, ObjectInfo] | None:
    """The volume's objects by key, or None (and a failure) when they cannot be listed."""
    try:
        return {
            obj.key: obj for obj in iter_objects(config, bucket=spec.bucket, prefix=sync.prefix)
        }
    except StorageError as error:
        sync.tracker.failed(_where(spec), _describe(error), counts_as_file=False)
        return None


def _start(
    direction: str,
    config: DatastoreConfig,
    spec: VolumeSpec,
    local_dir: Path | str,
    workers: int,
    progress: ProgressCallback | None,
) -> _Sync:
    if workers < 1:
        raise ValueError("workers must be at least 1")
    return _Sync(
        client=make_s3_client(config),
        bucket=spec.bucket,
        prefix=key_prefix(spec),
        root=Path(local_dir),
        tracker=Tracker(direction, progress),
        transfer=transfer_config(workers, 1),
    )


def _run(workers: int, task: Callable[[T], None], items: Iterable[T]) -> None:
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sync") as pool:
        for _ in pool.map(task, items):
            pass


def _is_file_key(key: str, sync: _Sync) -> bool:
    """Folder markers (keys ending with '/') are directories, not files."""
    return not key.endswith("/") and len(key) > len(sync.prefix)


def _make_folders(sync: _Sync, keys: list[str]) -> None:
    for key in keys:
        relative = key[len(sync.prefix) :].rstrip("/")
        try:
            if relative:
                local_path(sync.root, relative).mkdir(parents=True, exist_ok=True)
        except (OSError, UnsafeKeyError):
            pass  # an empty folder that cannot be made locally loses nothing


# ---- pull ------------------------------------------------------------------------------


def _pull_one(sync: _Sync, obj: ObjectInfo) -> None:
    try:
        path = local_path(sync.root, obj.key[len(sync.prefix) :])
        info = _regular_file_stat(path)
        if info is not None and not _pull_needed(path, info, obj):
            sync.tracker.skipped()
            return
        _download(sync, obj, path)
        sync.tracker.transferred()
    except Exception as error:  # one file's failure must not stop the others
        sync.tracker.failed(obj.key, _describe(error))


def _regular_file_stat(path: Path) -> os.stat_result | None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if path.is_symlink() or not path.is_file():
        raise IsADirectoryError(f"{path} exists and is not a regular file")
    return info


def _pull_needed(path: Path, info: os.stat_result, obj: ObjectInfo) -> bool:
    """Download unless the content is the same, or the local file is newer than the object
    (local work is never overwritten by an older object)."""
    same = same_content(path, info, obj, _hashes)
    if same:
        return False
    remote_time = obj.last_modified.timestamp()
    if same is None and int(info.st_mtime) == int(remote_time):
        return False  # pulled before (pull sets the object's date) and untouched since
    return info.st_mtime <= remote_time + NEWER_LOCAL_SLACK_S


def _download(sync: _Sync, obj: ObjectInfo, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temporary name in the same directory, then an atomic rename: an interrupted pull
    # never leaves a half-written file under the real name.
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=PARTIAL_PREFIX, suffix=PARTIAL_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as out:
            if obj.size <= SINGLE_REQUEST_LIMIT:
                _get_checked(sync, obj, out)
            else:
                sync.client.download_fileobj(
                    sync.bucket, obj.key, out, Config=sync.transfer, Callback=sync.tracker.add_bytes
                )
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    stamp = obj.last_modified.timestamp()
    os.utime(path, (stamp, stamp))


def _get_checked(sync: _Sync, obj: ObjectInfo, out: Any) -> None:
    body = sync.client.get_object(Bucket=sync.bucket, Key=obj.key)["Body"]
    digest = hashlib.md5(usedforsecurity=False)
    try:
        while block := body.read(MiB):
            digest.update(block)
            out.write(block)
            sync.tracker.add_bytes(len(block))
    finally:
        body.close()
    if len(obj.etag) == 32 and "-" not in obj.etag and digest.hexdigest() != obj.etag:
        raise IntegrityError(f"downloaded bytes do not match the ETag {obj.etag}")


# ---- push ------------------------------------------------------------------------------


def _push_one(sync: _Sync, file: LocalFile, obj: ObjectInfo | None) -> None:
    key = sync.prefix + file.relative
    try:
        _check_key(key)
        if obj is not None and not _push_needed(file, obj):
            sync.tracker.skipped()
            return
        _upload(sync, file, key)
        sync.tracker.transferred()
    except FileNotFoundError:
        sync.tracker.skipped()  # deleted since the scan (a rotated checkpoint): next push
    except Exception as error:  # one file's failure must not stop the others
        sync.tracker.failed(key, _describe(error))


def _check_key(key: str) -> None:
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise UnsafeKeyError("the file name is not valid UTF-8, so it cannot be a key") from None
    if size > MAX_KEY_BYTES:
        raise UnsafeKeyError(f"the key would be {size} bytes long; S3 allows {MAX_KEY_BYTES}")


def _push_needed(file: LocalFile, obj: ObjectInfo) -> bool:
    same = same_content(file.path, file.stat, obj, _hashes)
    if same is not None:
        return not same
    return int(file.stat.st_mtime) > int(obj.last_modified.timestamp())


def _upload(sync: _Sync, file: LocalFile, key: str) -> None:
    if file.stat.st_size > SINGLE_REQUEST_LIMIT:
        sync.client.upload_file(
            str(file.path), sync.bucket, key, Config=sync.transfer, Callback=sync.tracker.add_bytes
        )
        return
    data = file.path.read_bytes()
    md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
    response = sync.client.put_object(Bucket=sync.bucket, Key=key, Body=data)
    etag = str(response.get("ETag", "")).strip('"')
    if len(etag) == 32 and etag != md5:
        raise IntegrityError(f"the store answered ETag {etag} for bytes whose MD5 is {md5}")
    sync.tracker.add_bytes(len(data))
    if len(data) == file.stat.st_size:
        _hashes.remember(file.stat, md5)


def _delete_absent(
    config: DatastoreConfig, sync: _Sync, local: LocalScan, remote: dict[str, ObjectInfo]
) -> None:
    """Mirror local deletions (rwd); nothing is deleted when the scan missed something."""
    if local.errors:
        sync.tracker.failed(
            str(sync.root), "deletions skipped: the local scan was incomplete", counts_as_file=False
        )
        return
    absent = [key for key in remote if _absent_locally(key[len(sync.prefix) :], sync.root, local)]
    if not absent:
        return
    try:
        result = delete_objects(config, bucket=sync.bucket, keys=absent)
    except StorageError as error:
        sync.tracker.failed(sync.bucket, f"deletions failed: {error}", counts_as_file=False)
        return
    sync.tracker.deleted(len(result.deleted))
    for item in result.errors:
        sync.tracker.failed(
            item.key, f"delete failed: {item.code} {item.message}", counts_as_file=False
        )


def _absent_locally(relative: str, root: Path, local: LocalScan) -> bool:
    """True for an object whose file (or folder, for a marker) is gone; keys that could never
    exist locally (unsafe names) are left alone rather than deleted."""
    if not relative:
        return False
    name = relative.rstrip("/")
    try:
        local_path(root, name)
    except UnsafeKeyError:
        return False
    if relative.endswith("/"):
        return name not in local.dirs
    return relative not in local.files and relative not in local.symlinks


def _where(spec: VolumeSpec) -> str:
    return f"{spec.bucket}/{spec.prefix}" if spec.prefix else spec.bucket


def _describe(error: Exception) -> str:
    if isinstance(error, ClientError | BotoCoreError | StorageError):
        return translate(error).message
    if isinstance(error, OSError) and error.strerror:
        return f"{type(error).__name__}: {error.strerror}"
    return str(error) or type(error).__name__
