"""The pull's way into the local directory: each folder opened beneath the root's descriptor,
one at a time and without following a link (storage/sync/engine.py writes the files)."""

from __future__ import annotations

import errno
import os
import stat
import threading
from contextlib import suppress
from pathlib import Path

from storage.sync.local import UnsafeKeyError

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Folders:
    """The pull's side of the local directory: every file is written through a descriptor of
    its folder, reached from the root's descriptor one folder at a time without following a
    link (O_NOFOLLOW), so a folder swapped for a symlink during the pull leads nowhere.

    A key's folder is checked once per pull as `local_path` does (a symlinked folder may
    lead elsewhere inside the root, never outside it); the folders it resolves to are then
    opened beneath the root, and made when missing."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._real_root = root.resolve()
        self._fd = os.open(self._real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._resolved: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        os.close(self._fd)

    def locate(self, relative: str) -> tuple[tuple[str, ...], str]:
        """The folders below the root (links resolved) and the file name of a key below the
        volume prefix; UnsafeKeyError for a key that would land outside the root."""
        parts = relative.split("/")
        if any(part in ("", ".", "..") for part in parts) or "\0" in relative:
            raise UnsafeKeyError(f"unsafe key {relative!r}: empty, '.' or '..' segment")
        parent = tuple(parts[:-1])
        with self._lock:
            resolved = self._resolved.get(parent)
        if resolved is None:
            real = self._real_root.joinpath(*parent).resolve()
            if not real.is_relative_to(self._real_root):
                raise UnsafeKeyError(f"unsafe key {relative!r}: resolves outside {self.root}")
            resolved = real.relative_to(self._real_root).parts
            with self._lock:
                self._resolved[parent] = resolved
        return resolved, parts[-1]

    def open(self, folders: tuple[str, ...], relative: str) -> int:
        """A descriptor of the folder (the caller closes it), made when missing."""
        fd = os.dup(self._fd)
        try:
            for name in folders:
                following = _open_folder(fd, name, relative)
                os.close(fd)
                fd = following
        except BaseException:
            os.close(fd)
            raise
        return fd


def _open_folder(parent: int, name: str, relative: str) -> int:
    try:
        return os.open(name, _FOLDER, dir_fd=parent)
    except FileNotFoundError:
        with suppress(FileExistsError):
            os.mkdir(name, dir_fd=parent)
        return _open_folder(parent, name, relative)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            with suppress(OSError):
                if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise UnsafeKeyError(
                        f"unsafe key {relative!r}: a folder on its way became a symlink"
                    ) from None
        raise
