"""The sync engine: `pull` a volume into a directory, `push` a directory back to its volume.

Used by workloads locally and inside pods (`python -m storage.sync`, see storage/sync/cli.py).
A volume is a `VolumeSpec`; its objects are the keys under `<prefix>/` (the whole bucket when
the prefix is empty), and the key below that prefix is the path below the local directory.

Rules (safe by default):
- **Unchanged files are skipped.** A file and an object are the same when their sizes match
  and the local content hashes to the object's ETag: a plain MD5 for single-request uploads,
  or `md5(part md5s)-N` for multipart uploads made with 16 MiB (ours), 8 MiB or 5 MiB parts.
  Hashes are cached per (inode, size, mtime), so a periodic push re-reads only changed files.
  When the ETag cannot be checked (SSE-KMS, an unknown part size), dates decide: pull sets
  each file's mtime to the object's LastModified, so an untouched file matches exactly.
- **pull** downloads missing and changed files (through a temporary name, renamed when
  complete), checks small downloads against their MD5, and never deletes a local file. It
  does not overwrite a local file that is newer than the object (more than 2 s, for clock
  slack): local work that was not pushed yet survives a restart. Given a `manifest` path
  (outside every volume), it records the base of later pushes: each key's ETag and size, and
  the signature of the local file that holds it (storage/sync/manifest.py).
- **push** (`rw` or `rwd`; a read-only spec is refused) is three-way against that base, which
  each push moves forward to what it pushed:
  - a file that still holds the base's content is not sent, whatever the remote holds now;
  - a new or changed file is uploaded when its object is absent or still the base's;
  - a key changed on both sides (or created on both sides with other content) keeps the
    remote copy and is listed in `SyncStats.conflicts` (not a failure);
  - `rwd` deletes only keys of the base whose file is gone locally and whose object still
    carries the base's ETag; objects others uploaded are never deleted; nothing is deleted
    when the local scan was incomplete, nor keys that could never exist locally (`a/../b`).
  Without a base (no manifest) new files go and nothing is overwritten or deleted.
  `rw` never deletes remote objects.
- **Uploads never follow a link.** The scan walks folders by descriptor, each opened with
  O_NOFOLLOW beneath the root; the upload opens the file the same way, checks that it is the
  regular file the scan saw (device and inode), and reads that descriptor, never the path
  again. A file swapped for a symlink (to /proc/self/environ, say) or for another file since
  the scan is not uploaded and is reported as a failure; symlinks themselves are skipped.
- Keys that would escape the local directory (`..`, empty or `.` segments, through a
  symlinked folder) are refused and reported as failures; nothing is written for them.
- Files move in parallel (`workers` threads); files over 8 MiB use boto3 multipart transfers
  with 16 MiB parts. One file's failure never stops the others: it is listed in
  `SyncStats.failures`, and local data is never modified by a push.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from storage.sync.engine import key_prefix, pull
    from storage.sync.pushing import push
    from storage.sync.stats import ProgressCallback, SyncFailure, SyncStats

__all__ = ["ProgressCallback", "SyncFailure", "SyncStats", "key_prefix", "pull", "push"]

_ENGINE = {"key_prefix", "pull"}


def __getattr__(name: str) -> Any:
    # Imported lazily: `python -m storage.sync` imports this package before its __main__, and
    # the checkpoint sidecar must install its signal handlers before boto3 loads (~1 s).
    if name in _ENGINE:
        from storage.sync import engine

        return getattr(engine, name)
    if name == "push":
        from storage.sync import pushing

        return pushing.push
    if name in __all__:
        from storage.sync import stats

        return getattr(stats, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
