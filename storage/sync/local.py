"""The local side of a sync: key <-> path mapping that cannot escape the directory, the scan of
a directory, and content hashes that match S3 ETags."""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from s3transfer.utils import ChunksizeAdjuster

from storage.objects import ObjectInfo
from storage.sync.stats import SyncFailure

MiB = 1024 * 1024
PART_SIZE = 16 * MiB  # the multipart chunk size our pushes use
# Part sizes other tools use, so their multipart ETags can be checked too (aws-cli, boto3: 8).
OTHER_PART_SIZES = (8 * MiB, 5 * MiB)
PARTIAL_PREFIX = ".ajuste-"
PARTIAL_SUFFIX = ".partial"
MAX_KEY_BYTES = 1024
READ_BLOCK = MiB

_MD5_ETAG = re.compile(r"[0-9a-f]{32}")
_MULTIPART_ETAG = re.compile(r"[0-9a-f]{32}-(\d+)")


class UnsafeKeyError(ValueError):
    """An object key that would land outside the local directory (or nowhere sensible)."""


def local_path(root: Path, relative: str) -> Path:
    """Where the object at `relative` (its key below the volume prefix) lives under `root`.

    Refuses keys with empty, '.' or '..' segments or NUL, and keys whose parent directory
    resolves (through a symlink) outside `root`: a bucket must never write outside a volume."""
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\0" in relative:
        raise UnsafeKeyError(f"unsafe key {relative!r}: empty, '.' or '..' segment")
    path = root.joinpath(*parts)
    if not path.parent.resolve().is_relative_to(root.resolve()):
        raise UnsafeKeyError(f"unsafe key {relative!r}: resolves outside {root}")
    return path


def is_partial(name: str) -> bool:
    """True for our own temporary download files, which are never pushed."""
    return name.startswith(PARTIAL_PREFIX) and name.endswith(PARTIAL_SUFFIX)


@dataclass(frozen=True)
class LocalFile:
    """A regular file under the local directory; `relative` uses '/' like a key."""

    relative: str
    path: Path
    stat: os.stat_result


@dataclass
class LocalScan:
    """What a push sees locally: regular files, directories, symlinks (never followed, never
    pushed) and the paths that could not be read (`errors`: deletions are then skipped)."""

    files: dict[str, LocalFile] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    symlinks: list[str] = field(default_factory=list)
    errors: list[SyncFailure] = field(default_factory=list)


def scan(root: Path) -> LocalScan:
    """Walk `root` without following symlinks."""
    result = LocalScan()
    pending = [(root, "")]
    while pending:
        directory, relative = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as error:
            result.errors.append(SyncFailure(key=relative or ".", error=_describe(error)))
            continue
        for entry in entries:
            _scan_entry(entry, relative + entry.name, result, pending)
    return result


def _scan_entry(
    entry: os.DirEntry[str], relative: str, result: LocalScan, pending: list[tuple[Path, str]]
) -> None:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError as error:
        result.errors.append(SyncFailure(key=relative, error=_describe(error)))
        return
    if stat.S_ISLNK(info.st_mode):
        result.symlinks.append(relative)
    elif stat.S_ISDIR(info.st_mode):
        result.dirs.add(relative)
        pending.append((Path(entry.path), relative + "/"))
    elif stat.S_ISREG(info.st_mode) and not is_partial(entry.name):
        result.files[relative] = LocalFile(relative=relative, path=Path(entry.path), stat=info)


def _describe(error: OSError) -> str:
    return f"{type(error).__name__}: {error.strerror or error}"


class HashCache:
    """MD5 and multipart ETags of local files, remembered per (inode, size, mtime) so that the
    periodic push of a large checkpoint does not re-read it when it has not changed."""

    MAX_ENTRIES = 200_000

    def __init__(self) -> None:
        self._values: dict[tuple[int, int, int, int, int], str] = {}
        self._lock = threading.Lock()

    def etag(self, path: Path, info: os.stat_result, part_size: int = 0) -> str:
        """The ETag S3 gives this content: plain MD5, or multipart with `part_size` parts."""
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, part_size)
        with self._lock:
            cached = self._values.get(key)
        if cached is not None:
            return cached
        value = _multipart_etag(path, part_size) if part_size else _md5(path)
        with self._lock:
            if len(self._values) >= self.MAX_ENTRIES:
                self._values.clear()
            self._values[key] = value
        return value

    def remember(self, info: os.stat_result, etag: str) -> None:
        """Record the MD5 just computed for an upload, for the next comparison."""
        with self._lock:
            key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, 0)
            self._values[key] = etag


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as stream:
        while block := stream.read(READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _multipart_etag(path: Path, part_size: int) -> str:
    digests = []
    with path.open("rb") as stream:
        while True:
            part = hashlib.md5(usedforsecurity=False)
            remaining = part_size
            while remaining and (block := stream.read(min(READ_BLOCK, remaining))):
                part.update(block)
                remaining -= len(block)
            if remaining == part_size:
                break
            digests.append(part.digest())
    combined = hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()
    return f"{combined}-{len(digests)}"


def candidate_part_sizes(size: int, parts: int) -> list[int]:
    """Part sizes that known uploaders (us, aws-cli, boto3) would use for `size` bytes and
    that give exactly `parts` parts."""
    adjuster = ChunksizeAdjuster()
    sizes = [adjuster.adjust_chunksize(chunk, size) for chunk in (PART_SIZE, *OTHER_PART_SIZES)]
    return [chunk for chunk in dict.fromkeys(sizes) if math.ceil(size / chunk) == parts]


def same_content(
    path: Path, info: os.stat_result, obj: ObjectInfo, hashes: HashCache
) -> bool | None:
    """Whether the file holds the object's bytes: True/False when the ETag can tell (a plain
    MD5, or a multipart ETag whose part size we can reproduce), None when it cannot."""
    if info.st_size != obj.size:
        return False
    if _MD5_ETAG.fullmatch(obj.etag):
        return hashes.etag(path, info) == obj.etag
    match = _MULTIPART_ETAG.fullmatch(obj.etag)
    if match:
        for part_size in candidate_part_sizes(obj.size, int(match.group(1))):
            if hashes.etag(path, info, part_size) == obj.etag:
                return True
    return None  # SSE-KMS, unknown part size, or a store with its own ETag scheme
