"""pull(), and what push() (storage/sync/pushing.py) shares with it: the rules are in the
package docstring (storage/sync/__init__.py)."""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.errors import StorageError, translate
from storage.objects import ObjectInfo, iter_objects
from storage.sync.direct import Direct, DirectError
from storage.sync.folders import Folders
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

if TYPE_CHECKING:  # boto3 loads (~0.2 s) only when a call needs it: large files, a fallback
    from boto3.s3.transfer import TransferConfig
    from botocore.client import BaseClient

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

    config: DatastoreConfig
    bucket: str
    prefix: str  # the key prefix of the volume, "" or ending with '/'
    root: Path
    tracker: Tracker
    direct: Direct  # plain signed requests for listings and small files (storage/sync/direct.py)
    workers: int
    large_files: int = 1

    @property
    def client(self) -> BaseClient:
        """The datastore's boto3 client (built on first use, then shared)."""
        return make_s3_client(self.config)

    @property
    def transfer(self) -> TransferConfig:
        return transfer_config(self.workers, self.large_files)


def key_prefix(spec: VolumeSpec) -> str:
    """The key prefix of a volume: "" for a whole bucket, else the prefix and '/'."""
    return f"{spec.prefix}/" if spec.prefix else ""


def transfer_config(workers: int, large_files: int) -> TransferConfig:
    """boto3 settings for large files: 16 MiB parts; about 40 parts in flight in all, shared
    by the large files that can move at once (10 for a lone file, as boto3's default)."""
    from boto3.s3.transfer import TransferConfig

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
        folders = Folders(sync.root)
    except OSError as error:
        sync.tracker.failed(_where(spec), _describe(error), counts_as_file=False)
        return sync.tracker.finish()
    try:
        return _pull_listed(config, spec, sync, folders, workers, manifest)
    finally:
        folders.close()
        sync.direct.close()


def _pull_listed(
    config: DatastoreConfig,
    spec: VolumeSpec,
    sync: _Sync,
    folders: Folders,
    workers: int,
    manifest: Path | None,
) -> SyncStats:
    try:
        remote = list_volume(config, sync)
    except StorageError as error:
        sync.tracker.failed(_where(spec), _describe(error), counts_as_file=False)
        return sync.tracker.finish()
    files = [obj for obj in remote if _is_file_key(obj.key, sync)]
    large = sum(1 for obj in files if obj.size > SINGLE_REQUEST_LIMIT)
    sync = replace(sync, large_files=large)
    markers = [obj for obj in remote if not _is_file_key(obj.key, sync)]
    _make_folders(sync, [obj.key for obj in markers])
    sync.tracker.add_total(len(files))
    outcomes = _run(workers, lambda obj: _pull_one(sync, folders, obj), files)
    if manifest is not None:
        _record_pull(manifest, spec, sync, zip(files, outcomes, strict=True), markers)
    return sync.tracker.finish()


def list_volume(config: DatastoreConfig, sync: _Sync) -> list[ObjectInfo]:
    """The volume's objects: one plain request a page, or boto3's listing when that fails
    (StorageError then, as `iter_objects`)."""
    if sync.direct.usable:
        try:
            return sync.direct.list_objects(sync.bucket, sync.prefix)
        except DirectError:
            pass
    return list(iter_objects(config, bucket=sync.bucket, prefix=sync.prefix))


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
        config=config,
        bucket=spec.bucket,
        prefix=key_prefix(spec),
        root=Path(local_dir),
        tracker=Tracker(direction, progress),
        direct=Direct(config),
        workers=workers,
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

_EXISTING = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_PARTIAL = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_Folders = Folders  # its old name here (tests/storage/test_sync_direct.py)


def _pull_one(sync: _Sync, folders: Folders, obj: ObjectInfo) -> Signature | bool | None:
    """The signature of the local file now holding the object; True when a newer local file
    was kept; None when it failed."""
    try:
        relative = obj.key[len(sync.prefix) :]
        parents, name = folders.locate(relative)
        folder = folders.open(parents, relative)
        try:
            kept = _kept(folder, name, obj)
            if kept is not None:
                sync.tracker.skipped()
                return kept
            outcome = _download(sync, obj, folder, name)
        finally:
            os.close(folder)
        sync.tracker.transferred()
        return outcome
    except Exception as error:  # one file's failure must not stop the others
        sync.tracker.failed(obj.key, _describe(error))
        return None


def _kept(folder: int, name: str, obj: ObjectInfo) -> Signature | bool | None:
    """For a file already there that the pull leaves alone: its signature when it holds the
    object, True when it is newer local work; None when the object must be downloaded."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise IsADirectoryError(f"{name} exists and is not a regular file")
    if info.st_size != obj.size and info.st_mtime <= obj.last_modified.timestamp():
        return None  # an older file of another size: replaced without reading it
    with os.fdopen(os.open(name, _EXISTING, dir_fd=folder), "rb") as stream:
        if _pull_needed(stream, info, obj):
            return None
        return signature(info) if _agrees(stream, info, obj) else True


def _agrees(stream: BinaryIO, info: os.stat_result, obj: ObjectInfo) -> bool:
    """A local file the pull left alone holds the object (not newer local work)."""
    same = same_content(stream, info, obj, _hashes)
    if same is None:
        return int(info.st_mtime) == int(obj.last_modified.timestamp())
    return same


def _pull_needed(stream: BinaryIO, info: os.stat_result, obj: ObjectInfo) -> bool:
    """Download unless the content is the same, or the local file is newer than the object
    (local work is never overwritten by an older object)."""
    same = same_content(stream, info, obj, _hashes)
    if same:
        return False
    remote_time = obj.last_modified.timestamp()
    if same is None and int(info.st_mtime) == int(remote_time):
        return False  # pulled before (pull sets the object's date) and untouched since
    return info.st_mtime <= remote_time + NEWER_LOCAL_SLACK_S


def _download(sync: _Sync, obj: ObjectInfo, folder: int, name: str) -> Signature:
    """Download into a temporary name in the same folder, dated like the object, then rename
    it atomically: an interrupted pull never leaves a half-written file under the real name."""
    temporary = f"{PARTIAL_PREFIX}{secrets.token_hex(8)}{PARTIAL_SUFFIX}"
    fd = os.open(temporary, _PARTIAL, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            if obj.size <= SINGLE_REQUEST_LIMIT:
                _get_checked(sync, obj, out)
            else:
                sync.client.download_fileobj(
                    sync.bucket, obj.key, out, Config=sync.transfer, Callback=sync.tracker.add_bytes
                )
            out.flush()
            stamp = obj.last_modified.timestamp()
            os.utime(out.fileno(), (stamp, stamp))
            info = os.fstat(out.fileno())
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise
    return signature(info)


def _get_checked(sync: _Sync, obj: ObjectInfo, out: BinaryIO) -> None:
    """One GET (a plain request, else boto3's), its bytes checked against the ETag."""
    digest = hashlib.md5(usedforsecurity=False)

    def write(block: bytes) -> None:
        digest.update(block)
        out.write(block)

    size = -1
    if sync.direct.usable:
        try:
            size = sync.direct.get_object(sync.bucket, obj.key, write)
        except DirectError:
            out.seek(0)
            out.truncate()
            digest = hashlib.md5(usedforsecurity=False)
    if size < 0:
        body = sync.client.get_object(Bucket=sync.bucket, Key=obj.key)["Body"]
        size = 0
        try:
            while block := body.read(MiB):
                write(block)
                size += len(block)
        finally:
            body.close()
    sync.tracker.add_bytes(size)
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
