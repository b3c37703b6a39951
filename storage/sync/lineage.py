"""A run's data lineage: exactly which objects a pull read, so "this adapter was trained on these
objects" is answerable long after the run.

A pull that mounts a writable volume at `/workspace/output` (the fine-tune preset's output,
and any custom job's that follows it) writes `.ajuste/lineage.json` into it once every volume
is pulled; the run's push then carries it to the bucket beside what the run wrote. It lists,
for each other volume, the keys its pull's manifest records as now held locally (manifest.py)
with their ETag and size, the object's version where the bucket keeps versions, and a digest
of all that: two runs with the same digest read the same bytes under the same keys.

    {"version": 1, "volumes": [{"spec": "b@GRA/chat:/workspace/data:ro", "bucket": "b",
      "alias": "GRA", "prefix": "chat", "mount_path": "/workspace/data",
      "digest": "sha256:...", "versioned": false,
      "objects": {"chat/train.jsonl": {"etag": "...", "size": 1234, "version": null}}}]}

The panel reads it once, when the run has ended, and keeps it (`read_lineage` checks every
field: the file lies in a user's bucket). `changed_keys` says what differs between two.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.volumes import Mode, VolumeSpec, render_volume_spec

VERSION = 1
OUTPUT_MOUNT = "/workspace/output"
LINEAGE_PATH = ".ajuste/lineage.json"  # below the output volume's directory (and prefix)
MAX_OBJECTS = 100_000  # per volume, as read back: a document past this is refused


class LineageError(Exception):
    """A lineage document that is not one (its message says what is wrong)."""


@dataclass(frozen=True)
class Pulled:
    """One object as pulled: its ETag, size, and version (None where the bucket keeps none)."""

    etag: str
    size: int
    version: str | None = None


def digest(objects: Mapping[str, Pulled]) -> str:
    """sha256 of the sorted (key, ETag, size, version) lines: equal digests, equal inputs."""
    hasher = hashlib.sha256()
    for key in sorted(objects):
        item = objects[key]
        line = json.dumps([key, item.etag, item.size, item.version], separators=(",", ":"))
        hasher.update(line.encode() + b"\n")
    return f"sha256:{hasher.hexdigest()}"


def lineage_target(specs: Iterable[VolumeSpec]) -> VolumeSpec | None:
    """The writable volume at /workspace/output, where the lineage goes; None without one."""
    for spec in specs:
        if spec.mount_path == OUTPUT_MOUNT and spec.mode is not Mode.RO:
            return spec
    return None


def volume_entry(
    spec: VolumeSpec, objects: Mapping[str, Pulled], versioned: bool
) -> dict[str, Any]:
    """One volume of the document."""
    return {
        "spec": render_volume_spec(spec),
        "bucket": spec.bucket,
        "alias": spec.alias,
        "prefix": spec.prefix,
        "mount_path": spec.mount_path,
        "digest": digest(objects),
        "versioned": versioned,
        "objects": {
            key: {"etag": o.etag, "size": o.size, "version": o.version}
            for key, o in sorted(objects.items())
        },
    }


def write_lineage(path: Path, volumes: Sequence[dict[str, Any]]) -> None:
    """Write the document atomically (a temporary file renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".lineage-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"version": VERSION, "volumes": list(volumes)}, out, separators=(",", ":"))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_lineage(text: str | bytes) -> list[dict[str, Any]]:
    """The volumes of a lineage document, every field checked; LineageError otherwise."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        raise LineageError("the lineage file is not JSON") from None
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise LineageError("the lineage file has an unknown format")
    volumes = document.get("volumes")
    if not isinstance(volumes, list):
        raise LineageError("the lineage file lists no volumes")
    return [_checked_volume(volume) for volume in volumes]


def _checked_volume(volume: Any) -> dict[str, Any]:
    if not isinstance(volume, dict):
        raise LineageError("a volume of the lineage file is not an object")
    texts = ("spec", "bucket", "alias", "prefix", "mount_path")
    if not all(isinstance(volume.get(name), str) for name in texts):
        raise LineageError("a volume of the lineage file lacks its spec")
    objects = volume.get("objects")
    if not isinstance(objects, dict) or len(objects) > MAX_OBJECTS:
        raise LineageError(f"the volume {volume['spec']} has no readable object list")
    pulled = {str(key): _checked_object(key, value) for key, value in objects.items()}
    entry = volume_entry(_spec_of(volume), pulled, bool(volume.get("versioned")))
    if volume.get("digest") != entry["digest"]:
        raise LineageError(f"the digest of {volume['spec']} does not match its objects")
    entry["spec"] = volume["spec"]
    return entry


def _checked_object(key: str, value: Any) -> Pulled:
    if not isinstance(value, dict) or not isinstance(value.get("etag"), str):
        raise LineageError(f"the object {key} has no ETag")
    size, version = value.get("size"), value.get("version")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise LineageError(f"the object {key} has no size")
    if version is not None and not isinstance(version, str):
        raise LineageError(f"the object {key} has a version that is no text")
    return Pulled(etag=value["etag"], size=size, version=version)


def _spec_of(volume: dict[str, Any]) -> VolumeSpec:
    return VolumeSpec(
        bucket=volume["bucket"],
        alias=volume["alias"],
        prefix=volume["prefix"],
        mount_path=volume["mount_path"],
        mode=Mode.RO,
    )


@dataclass(frozen=True)
class Changes:
    """What differs between two runs' inputs at one mount path: keys only one read, and keys
    both read with other content (or another version)."""

    mount_path: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def changed_keys(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[Changes]:
    """For each mount path either run read (checked volumes, `read_lineage`'s): the keys
    `after` read that `before` did not, the reverse, and those whose object differs."""
    old = {v["mount_path"]: v["objects"] for v in before}
    new = {v["mount_path"]: v["objects"] for v in after}
    found = []
    for mount in sorted(set(old) | set(new)):
        a, b = old.get(mount, {}), new.get(mount, {})
        found.append(
            Changes(
                mount_path=mount,
                added=tuple(sorted(set(b) - set(a))),
                removed=tuple(sorted(set(a) - set(b))),
                changed=tuple(sorted(k for k in set(a) & set(b) if a[k] != b[k])),
            )
        )
    return found


# ---- the pull's side (storage/sync/cli.py calls `record`) ------------------------------------


def pulled_objects(spec: VolumeSpec, manifest: Path) -> dict[str, Pulled]:
    """The keys the pull's manifest records as held locally (each file holding the object's
    bytes), with their ETag and size; folder markers and kept newer files are left out."""
    from storage.sync.manifest import load_manifest

    return {
        key: Pulled(etag=entry.etag, size=entry.size)
        for key, entry in load_manifest(manifest, spec).items()
        if entry.local is not None
    }


def with_versions(
    config: Any, spec: VolumeSpec, objects: dict[str, Pulled]
) -> tuple[dict[str, Pulled], bool]:
    """The objects with their current version where the bucket keeps versions (an ETag that
    no longer matches the newest version leaves that key without one); unchanged, and False,
    where it keeps none or cannot say."""
    from storage.client import make_s3_client
    from storage.sync.engine import key_prefix

    client = make_s3_client(config)
    try:
        status = client.get_bucket_versioning(Bucket=spec.bucket).get("Status")
        if status not in ("Enabled", "Suspended"):
            return objects, False
        latest: dict[str, tuple[str, str]] = {}
        pages = client.get_paginator("list_object_versions").paginate(
            Bucket=spec.bucket, Prefix=key_prefix(spec)
        )
        for page in pages:
            for item in page.get("Versions", []):
                if item.get("IsLatest"):
                    latest[item["Key"]] = (str(item["VersionId"]), item["ETag"].strip('"'))
    except Exception:  # a store without versioning calls may answer anything
        return objects, False
    found = {}
    for key, item in objects.items():
        version, etag = latest.get(key, (None, None))
        found[key] = Pulled(item.etag, item.size, version if etag == item.etag else None)
    return found, True


def record(volumes: Sequence[tuple[VolumeSpec, Any, Path | None, Path]]) -> Path | None:
    """After a complete pull of (spec, datastore, manifest, local dir) volumes: the lineage
    written into the writable /workspace/output volume's directory, or None without one."""
    target = lineage_target(spec for spec, _, _, _ in volumes)
    if target is None:
        return None
    entries = []
    for spec, config, manifest, _ in volumes:
        if spec == target or manifest is None:
            continue
        objects, versioned = with_versions(config, spec, pulled_objects(spec, manifest))
        entries.append(volume_entry(spec, objects, versioned))
    local_dir = next(local for spec, _, _, local in volumes if spec == target)
    path = local_dir / LINEAGE_PATH
    write_lineage(path, entries)
    return path
