"""The local side of a sync: key <-> path mapping that cannot escape the directory, the scan of
a directory, and content hashes that match S3 ETags."""

from __future__ import annotations

import errno
import hashlib
import math
import os
import re
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

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


Source = Path | BinaryIO  # what a content hash reads: a path, or a file already open


class Remote(Protocol):
    """What content comparisons need of an object: its ETag and size."""

    @property
    def etag(self) -> str: ...

    @property
    def size(self) -> int: ...


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
    """A regular file under the local directory; `relative` uses '/' like a key. `stat` is
    what the scan saw: the push uploads this very file (device and inode) or nothing."""

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


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a file swapped for a FIFO since the scan must not hang the push on open().
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class SwappedError(OSError):
    """A scanned file is no longer the same regular file: it is not followed nor uploaded."""


def open_beneath(root: Path, relative: str, *, directory: bool = False) -> int:
    """A descriptor of `relative` below `root`, opened without following any symlink: the
    root and every folder on the way are opened with O_NOFOLLOW|O_DIRECTORY from the one
    before, so a link swapped in anywhere makes this fail (ELOOP, ENOTDIR) instead of leading
    elsewhere. `directory` opens a folder ("" is the root itself)."""
    fd = os.open(root, _DIRECTORY)
    parts = relative.split("/") if relative else []
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            flags = _FILE if last and not directory else _DIRECTORY
            following = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = following
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_scanned(root: Path, file: LocalFile) -> tuple[BinaryIO, os.stat_result]:
    """The file the scan saw, opened beneath `root` without following links, and its stat.
    FileNotFoundError when it is gone; SwappedError when a link, a non-regular file or
    another file (another device or inode) now stands at its path."""
    try:
        fd = open_beneath(root, file.relative)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise SwappedError(
                error.errno, "replaced by a symlink since the scan: not followed"
            ) from None
        raise
    stream = os.fdopen(fd, "rb")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SwappedError(errno.EINVAL, "no longer a regular file: not uploaded")
        if (info.st_dev, info.st_ino) != (file.stat.st_dev, file.stat.st_ino):
            raise SwappedError(
                errno.ESTALE, "replaced by another file since the scan: not uploaded"
            )
    except BaseException:
        stream.close()
        raise
    return stream, info


def scan(root: Path) -> LocalScan:
    """Walk `root` without following symlinks: every folder is opened beneath the root
    (`open_beneath`), so a folder swapped for a link during the walk is an error, not a
    detour; the walk lists descriptors, never paths."""
    result = LocalScan()
    pending = [""]
    while pending:
        relative = pending.pop()
        folder = relative.rstrip("/")
        try:
            fd = open_beneath(root, folder, directory=True)
        except OSError as error:
            result.errors.append(SyncFailure(key=folder or ".", error=_describe(error)))
            continue
        try:
            for entry in list(os.scandir(fd)):
                _scan_entry(root, entry, relative + entry.name, result, pending)
        except OSError as error:
            result.errors.append(SyncFailure(key=folder or ".", error=_describe(error)))
        finally:
            os.close(fd)
    return result


def _scan_entry(
    root: Path, entry: os.DirEntry[str], relative: str, result: LocalScan, pending: list[str]
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
        pending.append(relative + "/")
    elif stat.S_ISREG(info.st_mode) and not is_partial(entry.name):
        path = root.joinpath(*relative.split("/"))
        result.files[relative] = LocalFile(relative=relative, path=path, stat=info)


def _describe(error: OSError) -> str:
    return f"{type(error).__name__}: {error.strerror or error}"


class HashCache:
    """MD5 and multipart ETags of local files, remembered per (inode, size, mtime) so that the
    periodic push of a large checkpoint does not re-read it when it has not changed."""

    MAX_ENTRIES = 200_000

    def __init__(self) -> None:
        self._values: dict[tuple[int, int, int, int, int], str] = {}
        self._lock = threading.Lock()

    def etag(self, source: Source, info: os.stat_result, part_size: int = 0) -> str:
        """The ETag S3 gives this content: plain MD5, or multipart with `part_size` parts.
        `source` is a path (files the pull wrote) or an open file (what a push uploads)."""
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, part_size)
        with self._lock:
            cached = self._values.get(key)
        if cached is not None:
            return cached
        value = _multipart_etag(source, part_size) if part_size else _md5(source)
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


@contextmanager
def _reading(source: Source) -> Iterator[BinaryIO]:
    """An open file from the start: a path is opened (and closed), a file is rewound."""
    if isinstance(source, Path):
        with source.open("rb") as stream:
            yield stream
        return
    source.seek(0)
    yield source


def _md5(source: Source) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with _reading(source) as stream:
        while block := stream.read(READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _multipart_etag(source: Source, part_size: int) -> str:
    digests = []
    with _reading(source) as stream:
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
    from s3transfer.utils import ChunksizeAdjuster  # with boto3: only for multipart ETags

    adjuster = ChunksizeAdjuster()
    sizes = [adjuster.adjust_chunksize(chunk, size) for chunk in (PART_SIZE, *OTHER_PART_SIZES)]
    return [chunk for chunk in dict.fromkeys(sizes) if math.ceil(size / chunk) == parts]


def same_content(
    source: Source, info: os.stat_result, obj: ObjectInfo | Remote, hashes: HashCache
) -> bool | None:
    """Whether the file holds the object's bytes: True/False when the ETag can tell (a plain
    MD5, or a multipart ETag whose part size we can reproduce), None when it cannot."""
    if info.st_size != obj.size:
        return False
    if _MD5_ETAG.fullmatch(obj.etag):
        return hashes.etag(source, info) == obj.etag
    match = _MULTIPART_ETAG.fullmatch(obj.etag)
    if match:
        for part_size in candidate_part_sizes(obj.size, int(match.group(1))):
            if hashes.etag(source, info, part_size) == obj.etag:
                return True
    return None  # SSE-KMS, unknown part size, or a store with its own ETag scheme
