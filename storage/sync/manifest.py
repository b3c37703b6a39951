"""The base of a three-way push: what the volume held when it was last synced.

The pull records, for every key it left in agreement with the local directory, the object's
ETag and size and the local file's (size, mtime in ns, inode); each push moves it forward to
what it pushed. A push compares both sides with it: a file is "changed locally" when it no
longer holds the base's content, an object "changed remotely" when its ETag is not the base's.

One JSON file per volume in a state directory that is never inside a volume (the CLI refuses
one that is): a volume's own bucket must not be able to rewrite the base of its push.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.volumes import VolumeSpec

VERSION = 1
Signature = tuple[int, int, int]  # (size, mtime_ns, inode) of a local file


class ManifestError(Exception):
    """A manifest that exists but cannot be read (the push then trusts no base)."""


@dataclass(frozen=True)
class Entry:
    """One key of the base: the object's ETag and size; `local` is the signature of the local
    file known to hold exactly these bytes (None when no local file is known to)."""

    etag: str
    size: int
    local: Signature | None = None


Base = dict[str, Entry]


def signature(info: os.stat_result) -> Signature:
    """What tells that a local file was not touched since: size, mtime (ns) and inode."""
    return (info.st_size, info.st_mtime_ns, info.st_ino)


def manifest_path(state_dir: Path, spec: VolumeSpec) -> Path:
    """The manifest of one volume (named by its bucket, datastore, prefix and mount path)."""
    identity = f"{spec.bucket}@{spec.alias}/{spec.prefix}:{spec.mount_path}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:24]
    return state_dir / f"manifest-{digest}.json"


def load_manifest(path: Path, spec: VolumeSpec) -> Base:
    """The base recorded at `path`; empty when there is none. ManifestError when it exists
    but is unreadable, or belongs to another volume."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise ManifestError(f"the pull's manifest {path} is unreadable: {error}") from None
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise ManifestError(f"the pull's manifest {path} has an unknown format")
    if (document.get("bucket"), document.get("prefix")) != (spec.bucket, spec.prefix):
        raise ManifestError(f"the manifest {path} belongs to another volume")
    try:
        return {key: _entry(value) for key, value in document["objects"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ManifestError(f"the pull's manifest {path} has an unknown format") from None


def _entry(value: Any) -> Entry:
    local = value.get("local")
    signature = None if local is None else (int(local[0]), int(local[1]), int(local[2]))
    return Entry(etag=str(value["etag"]), size=int(value["size"]), local=signature)


def save_manifest(path: Path, spec: VolumeSpec, base: Base) -> None:
    """Write the base atomically (a temporary file renamed), readable by its owner only."""
    document = {
        "version": VERSION,
        "bucket": spec.bucket,
        "prefix": spec.prefix,
        "objects": {
            key: {"etag": e.etag, "size": e.size, "local": list(e.local) if e.local else None}
            for key, e in sorted(base.items())
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".manifest-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            # dumps, not dump: only the one-shot encoder is json's C one (~5x faster here).
            out.write(json.dumps(document, ensure_ascii=False, separators=(",", ":")))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
