"""push(): a three-way push of a directory to its volume (the rules are in the package
docstring, storage/sync/__init__.py; the base is storage/sync/manifest.py)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from storage.datastore import DatastoreConfig
from storage.errors import StorageError
from storage.objects import ObjectInfo, delete_objects
from storage.sync.direct import DirectError
from storage.sync.engine import (
    DEFAULT_WORKERS,
    SINGLE_REQUEST_LIMIT,
    IntegrityError,
    _describe,
    _hashes,
    _run,
    _start,
    _Sync,
    _where,
    list_volume,
)
from storage.sync.local import (
    MAX_KEY_BYTES,
    LocalFile,
    LocalScan,
    Remote,
    UnsafeKeyError,
    local_path,
    open_scanned,
    same_content,
    scan,
)
from storage.sync.manifest import Base, Entry, ManifestError, load_manifest, save_manifest
from storage.sync.manifest import signature as signature_of
from storage.sync.stats import ProgressCallback, SyncStats
from storage.volumes import Mode, VolumeSpec


def push(
    config: DatastoreConfig,
    spec: VolumeSpec,
    local_dir: Path | str,
    *,
    delete: bool | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: ProgressCallback | None = None,
    manifest: Path | None = None,
) -> SyncStats:
    """Upload the files of `local_dir` changed since the base recorded at `manifest` (by the
    pull, then by each push); `delete` (default: the spec is `rwd`) also removes the objects
    whose file is gone locally and that still hold the base's content. A key changed on both
    sides keeps the remote copy and is listed in `conflicts`. Without a manifest the base is
    empty: new files go, nothing is overwritten with other content, nothing is deleted.
    A read-only spec is refused (ValueError)."""
    if spec.mode is Mode.RO:
        raise ValueError(f"volume {spec.bucket}@{spec.alias} is read-only: it is never pushed")
    sync = _start("push", config, spec, local_dir, workers, progress)
    base = _load_base(manifest, spec, sync)
    local = _scan_local(sync)
    remote = _list_remote(config, spec, sync) if local is not None else None
    if local is None or remote is None:
        sync.direct.close()
        return sync.tracker.finish()
    large = sum(1 for file in local.files.values() if file.stat.st_size > SINGLE_REQUEST_LIMIT)
    sync = replace(sync, large_files=large)
    sync.tracker.add_total(len(local.files) + len(local.symlinks))
    for _ in local.symlinks:
        sync.tracker.skipped()  # never followed: a link could point anywhere on this machine
    files = list(local.files.values())
    try:
        entries = _run(workers, lambda file: _push_one(sync, file, base, remote), files)
    finally:
        sync.direct.close()
    new_base = dict(base)
    for file, entry in zip(files, entries, strict=True):
        if entry is not None:
            new_base[sync.prefix + file.relative] = entry
    if spec.mode is Mode.RWD if delete is None else delete:
        _delete_absent(config, sync, local, remote, new_base)
    if manifest is not None:
        _save_base(manifest, spec, sync, new_base)
    return sync.tracker.finish()


def _load_base(manifest: Path | None, spec: VolumeSpec, sync: _Sync) -> Base:
    if manifest is None:
        return {}
    try:
        return load_manifest(manifest, spec)
    except ManifestError as error:
        # No base: nothing is deleted and nothing overwritten with other content.
        sync.tracker.failed(str(manifest), str(error), counts_as_file=False)
        return {}


def _save_base(manifest: Path, spec: VolumeSpec, sync: _Sync, base: Base) -> None:
    try:
        save_manifest(manifest, spec, base)
    except OSError as error:
        message = f"cannot record the manifest: {_describe(error)}"
        sync.tracker.failed(str(manifest), message, counts_as_file=False)


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
        return {obj.key: obj for obj in list_volume(config, sync)}
    except StorageError as error:
        sync.tracker.failed(_where(spec), _describe(error), counts_as_file=False)
        return None


def _push_one(
    sync: _Sync, file: LocalFile, base: Base, remote: dict[str, ObjectInfo]
) -> Entry | None:
    """Push one file if it must go; its new base entry (None: the base stays as it was).
    The file is read through the descriptor that `open_scanned` checked, never by path."""
    key = sync.prefix + file.relative
    try:
        _check_key(key)
        stream, info = open_scanned(sync.root, file)
        with stream:
            return _push_open(sync, key, stream, info, base.get(key), remote.get(key))
    except FileNotFoundError:
        sync.tracker.skipped()  # deleted since the scan (a rotated checkpoint): next push
    except Exception as error:  # one file's failure must not stop the others
        sync.tracker.failed(key, _describe(error))
    return None


def _push_open(
    sync: _Sync,
    key: str,
    stream: BinaryIO,
    info: os.stat_result,
    entry: Entry | None,
    obj: ObjectInfo | None,
) -> Entry | None:
    """The three-way decision for one open file."""
    if entry is not None and _holds(stream, info, entry):
        sync.tracker.skipped()  # untouched since the base: whatever the remote holds stays
        return replace(entry, local=signature_of(info))
    if obj is None or (entry is not None and _same_object(obj, entry)):
        pushed = _upload(sync, stream, info, key)  # new, or changed here only
        sync.tracker.transferred()
        return pushed
    if same_content(stream, info, obj, _hashes):
        sync.tracker.skipped()  # the same change on both sides
        return Entry(obj.etag, obj.size, signature_of(info))
    sync.tracker.conflict(key)  # changed on both sides: the remote copy is kept
    return None


def _holds(stream: BinaryIO, info: os.stat_result, entry: Entry) -> bool:
    """Whether the local file still holds the base's content."""
    if entry.local is not None and entry.local == signature_of(info):
        return True
    return bool(same_content(stream, info, entry, _hashes))


def _same_object(obj: Remote, entry: Entry) -> bool:
    """The object is the one the base knew (unchanged remotely)."""
    return obj.etag == entry.etag and obj.size == entry.size


def _check_key(key: str) -> None:
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise UnsafeKeyError("the file name is not valid UTF-8, so it cannot be a key") from None
    if size > MAX_KEY_BYTES:
        raise UnsafeKeyError(f"the key would be {size} bytes long; S3 allows {MAX_KEY_BYTES}")


def _upload(sync: _Sync, stream: BinaryIO, info: os.stat_result, key: str) -> Entry:
    """Upload from the open file; the base entry of what was sent (with the local file's
    signature only if the file did not change while it was read)."""
    stream.seek(0)
    md5 = None
    if info.st_size > SINGLE_REQUEST_LIMIT:
        sync.client.upload_fileobj(
            stream, sync.bucket, key, Config=sync.transfer, Callback=sync.tracker.add_bytes
        )
        head = sync.client.head_object(Bucket=sync.bucket, Key=key)
        etag, size = str(head.get("ETag", "")).strip('"'), int(head["ContentLength"])
    else:
        data = stream.read()
        digest = hashlib.md5(data, usedforsecurity=False)
        md5 = digest.hexdigest()
        etag, size = _put_small(sync, key, data, digest.digest()), len(data)
        if len(etag) == 32 and etag != md5:
            raise IntegrityError(f"the store answered ETag {etag} for bytes whose MD5 is {md5}")
        sync.tracker.add_bytes(size)
    before = signature_of(info)
    unchanged = signature_of(os.fstat(stream.fileno())) == before and size == info.st_size
    if unchanged and md5 is not None:
        _hashes.remember(info, md5)
    return Entry(etag, size, before if unchanged else None)


def _put_small(sync: _Sync, key: str, data: bytes, md5: bytes) -> str:
    """One PUT (a plain request with Content-MD5, else boto3's); the ETag answered."""
    if sync.direct.usable:
        try:
            return sync.direct.put_object(sync.bucket, key, data, md5)
        except DirectError:
            pass
    response = sync.client.put_object(Bucket=sync.bucket, Key=key, Body=data)
    return str(response.get("ETag", "")).strip('"')


def _delete_absent(
    config: DatastoreConfig,
    sync: _Sync,
    local: LocalScan,
    remote: dict[str, ObjectInfo],
    base: Base,
) -> None:
    """Mirror local deletions (rwd), updating `base`: only keys of the base whose object
    still holds the base's content are deleted; nothing when the scan missed something."""
    if local.errors:
        sync.tracker.failed(
            str(sync.root), "deletions skipped: the local scan was incomplete", counts_as_file=False
        )
        return
    doomed = []
    for key, entry in list(base.items()):
        if not key.startswith(sync.prefix) or not _absent_locally(key, sync, local):
            continue
        obj = remote.get(key)
        if obj is None:
            del base[key]  # gone on both sides
        elif _same_object(obj, entry):
            doomed.append(key)
        else:
            sync.tracker.conflict(key, counts_as_file=False)  # changed there, deleted here
    if doomed:
        _delete(config, sync, doomed, base)


def _delete(config: DatastoreConfig, sync: _Sync, keys: list[str], base: Base) -> None:
    try:
        result = delete_objects(config, bucket=sync.bucket, keys=keys)
    except StorageError as error:
        sync.tracker.failed(sync.bucket, f"deletions failed: {error}", counts_as_file=False)
        return
    for key in result.deleted:
        base.pop(key, None)
    sync.tracker.deleted(len(result.deleted))
    for item in result.errors:
        sync.tracker.failed(
            item.key, f"delete failed: {item.code} {item.message}", counts_as_file=False
        )


def _absent_locally(key: str, sync: _Sync, local: LocalScan) -> bool:
    """True for an object whose file (or folder, for a marker) is gone; keys that could never
    exist locally (unsafe names) are left alone rather than deleted."""
    relative = key[len(sync.prefix) :]
    if not relative:
        return False
    name = relative.rstrip("/")
    try:
        local_path(sync.root, name)
    except UnsafeKeyError:
        return False
    if relative.endswith("/"):
        return name not in local.dirs
    return relative not in local.files and relative not in local.symlinks
