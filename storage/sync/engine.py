"""pull(), and what push() (storage/sync/pushing.py) shares with it: the rules are in the
package docstring (storage/sync/__init__.py)."""

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
from storage.objects import ObjectInfo, iter_objects
from storage.sync.local import (
    PART_SIZE,
    PARTIAL_PREFIX,
    PARTIAL_SUFFIX,
    HashCache,
    UnsafeKeyError,
    local_path,
    same_content,
)
from storage.sync.manifest import (
    Entry,
    ManifestError,
    Signature,
    load_manifest,
    save_manifest,
    signature,
)
from storage.sync.stats import ProgressCallback, SyncStats, Tracker
from storage.volumes import VolumeSpec

MiB = 1024 * 1024
# Up to this size a file moves in one request, read into memory and checked against its MD5.
SINGLE_REQUEST_LIMIT = 8 * MiB
# A local file newer than the object by more than this is kept by pull (clock slack).
NEWER_LOCAL_SLACK_S = 2.0
DEFAULT_WORKERS = 8
MAX_PARTS_IN_FLIGHT = 40  # stays under the client's 64 pooled connections

_hashes = HashCache()  # shared by every sync of the process, so periodic pushes hash once
T = TypeVar("T")
R = TypeVar("R")


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
    manifest: Path | None = None,
) -> SyncStats:
    """Download the volume's objects into `local_dir` (created if needed); never deletes a
    local file. `manifest` (a path outside every volume) records the base of later pushes."""
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
    markers = [obj for obj in remote if not _is_file_key(obj.key, sync)]
    _make_folders(sync, [obj.key for obj in markers])
    sync.tracker.add_total(len(files))
    outcomes = _run(workers, lambda obj: _pull_one(sync, obj), files)
    if manifest is not None:
        _record_pull(manifest, spec, sync, zip(files, outcomes, strict=True), markers)
    return sync.tracker.finish()


def _record_pull(
    path: Path,
    spec: VolumeSpec,
    sync: _Sync,
    pulled: Iterable[tuple[ObjectInfo, Signature | bool | None]],
    markers: list[ObjectInfo],
) -> None:
    """The new base: each object that now agrees with its local file; for a file kept
    because it is newer (or failed), the base it had, if any (else the object as pulled:
    the newer local file then wins, as before, unless someone changes the object since)."""
    try:
        old = load_manifest(path, spec)
    except ManifestError:
        old = {}
    base = dict(old)
    for obj in markers:
        base[obj.key] = Entry(obj.etag, obj.size)
    for obj, outcome in pulled:
        if isinstance(outcome, tuple):
            base[obj.key] = Entry(obj.etag, obj.size, outcome)
        elif outcome is True and obj.key not in old:  # kept: newer locally
            base[obj.key] = Entry(obj.etag, obj.size)
    try:
        save_manifest(path, spec, base)
    except OSError as error:
        sync.tracker.failed(
            str(path), f"cannot record the manifest: {_describe(error)}", counts_as_file=False
        )


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


def _run(workers: int, task: Callable[[T], R], items: Iterable[T]) -> list[R]:
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sync") as pool:
        return list(pool.map(task, items))


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


def _pull_one(sync: _Sync, obj: ObjectInfo) -> Signature | bool | None:
    """The signature of the local file now holding the object; True when a newer local file
    was kept; None when it failed."""
    try:
        path = local_path(sync.root, obj.key[len(sync.prefix) :])
        info = _regular_file_stat(path)
        if info is not None and not _pull_needed(path, info, obj):
            sync.tracker.skipped()
            return signature(info) if _agrees(path, info, obj) else True
        _download(sync, obj, path)
        sync.tracker.transferred()
        return signature(path.lstat())
    except Exception as error:  # one file's failure must not stop the others
        sync.tracker.failed(obj.key, _describe(error))
        return None


def _agrees(path: Path, info: os.stat_result, obj: ObjectInfo) -> bool:
    """A local file the pull left alone holds the object (not newer local work)."""
    same = same_content(path, info, obj, _hashes)
    if same is None:
        return int(info.st_mtime) == int(obj.last_modified.timestamp())
    return same


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


def _where(spec: VolumeSpec) -> str:
    return f"{spec.bucket}/{spec.prefix}" if spec.prefix else spec.bucket


def _describe(error: Exception) -> str:
    if isinstance(error, ClientError | BotoCoreError | StorageError):
        return translate(error).message
    if isinstance(error, OSError) and error.strerror:
        return f"{type(error).__name__}: {error.strerror}"
    return str(error) or type(error).__name__
