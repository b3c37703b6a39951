"""The push against two S3 servers (the embedded s3rver and moto): what it uploads is the file
the scan saw (never a link swapped in since), and it is three-way against the pull's manifest,
so nobody else's data is lost."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from storage.datastore import DatastoreConfig
from storage.objects import iter_objects, put_object, read_object
from storage.sync import ProgressCallback, SyncStats, pull, push
from storage.volumes import Mode, VolumeSpec
from tests.fixtures.s3 import S3_SERVERS, each_s3_server


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


SECRET = b"AWS_SECRET_ACCESS_KEY=the-datastore-wide-key"


def spec(bucket: str, mode: Mode) -> VolumeSpec:
    return VolumeSpec(
        bucket=bucket, alias="LOCAL", prefix="data", mount_path="/workspace/d", mode=mode
    )


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def bucket_contents(config: DatastoreConfig, bucket: str) -> dict[str, bytes]:
    return {
        info.key: read_object(config, bucket=bucket, key=info.key, max_bytes=1 << 20)
        for info in iter_objects(config, bucket=bucket)
    }


def between_scan_and_upload(action: Callable[[], None]) -> ProgressCallback:
    """A progress callback that runs `action` once: after the scan and the listing (the
    total is known), before any file is processed."""
    done: list[bool] = []

    def progress(stats: SyncStats) -> None:
        if stats.total and not stats.processed and not done:
            done.append(True)
            action()

    return progress


# ---- what is uploaded is what the scan saw -----------------------------------------------


def test_a_file_swapped_for_a_link_after_the_scan_is_not_followed(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    secrets = tmp_path / "sidecar"
    write(secrets / "notes.txt", SECRET)  # the same name as the scanned file in `sub`
    root = tmp_path / "workspace"
    write(root / "checkpoint.bin", b"weights")
    write(root / "sub/notes.txt", b"my notes")
    write(root / "ok.txt", b"fine")

    def swap() -> None:
        (root / "checkpoint.bin").unlink()
        (root / "checkpoint.bin").symlink_to("/proc/self/environ")
        shutil.rmtree(root / "sub")
        (root / "sub").symlink_to(secrets)

    stats = push(
        s3_server,
        spec(bucket, Mode.RW),
        root,
        workers=1,
        progress=between_scan_and_upload(swap),
    )
    contents = bucket_contents(s3_server, bucket)
    assert contents == {"data/ok.txt": b"fine"}
    environ = (os.environ.get("PATH") or "PATH").encode()
    assert not any(SECRET in data or environ in data for data in contents.values())
    failed = {failure.key: failure.error for failure in stats.failures}
    assert set(failed) == {"data/checkpoint.bin", "data/sub/notes.txt"}
    assert all("symlink" in error for error in failed.values())
    assert (stats.transferred, stats.failed) == (1, 2)


def test_a_file_replaced_by_another_after_the_scan_is_not_uploaded(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    secret = write(tmp_path / "elsewhere/key.pem", SECRET)
    root = tmp_path / "workspace"
    write(root / "model.bin", b"weights")

    def replace_by_hard_link() -> None:
        (root / "model.bin").unlink()
        os.link(secret, root / "model.bin")

    stats = push(
        s3_server,
        spec(bucket, Mode.RW),
        root,
        progress=between_scan_and_upload(replace_by_hard_link),
    )
    assert bucket_contents(s3_server, bucket) == {}
    assert [failure.key for failure in stats.failures] == ["data/model.bin"]
    assert "replaced by another file" in stats.failures[0].error


# ---- three-way against the pull's manifest -------------------------------------------------


def pulled(config: DatastoreConfig, bucket: str, tmp_path: Path, **objects: bytes) -> Path:
    """The volume with `objects` (keys below data/) pulled into tmp_path/workspace."""
    for key, data in objects.items():
        put_object(config, bucket=bucket, key=f"data/{key}", data=data)
    stats = pull(config, spec(bucket, Mode.RO), tmp_path / "workspace", manifest=tmp_path / "m")
    assert stats.ok
    return tmp_path / "workspace"


def test_rwd_keeps_what_others_uploaded_after_the_pull(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    root = pulled(s3_server, bucket, tmp_path, **{"mine.txt": b"mine"})
    put_object(s3_server, bucket=bucket, key="data/theirs.txt", data=b"uploaded meanwhile")
    put_object(s3_server, bucket=bucket, key="data/their-folder/", data=b"")
    stats = push(s3_server, spec(bucket, Mode.RWD), root, manifest=tmp_path / "m")
    assert bucket_contents(s3_server, bucket) == {
        "data/mine.txt": b"mine",
        "data/their-folder/": b"",
        "data/theirs.txt": b"uploaded meanwhile",
    }
    assert (stats.deleted, stats.conflicts, stats.ok) == (0, [], True)


def test_rw_does_not_upload_an_untouched_file_over_a_newer_remote(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    root = pulled(s3_server, bucket, tmp_path, **{"config.json": b'{"lr": 1}'})
    put_object(s3_server, bucket=bucket, key="data/config.json", data=b'{"lr": 0.5}')
    # Even a local file newer than the object, as long as it holds what was pulled.
    os.utime(root / "config.json")
    stats = push(s3_server, spec(bucket, Mode.RW), root, manifest=tmp_path / "m")
    assert bucket_contents(s3_server, bucket) == {"data/config.json": b'{"lr": 0.5}'}
    assert (stats.transferred, stats.skipped, stats.conflicts) == (0, 1, [])


def test_a_key_changed_on_both_sides_keeps_the_remote_copy_and_is_a_conflict(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    root = pulled(s3_server, bucket, tmp_path, **{"a.txt": b"base", "b.txt": b"base"})
    write(root / "a.txt", b"changed here")
    put_object(s3_server, bucket=bucket, key="data/a.txt", data=b"changed there")
    (root / "b.txt").unlink()
    put_object(s3_server, bucket=bucket, key="data/b.txt", data=b"changed there too")
    write(root / "c.txt", b"created here")
    put_object(s3_server, bucket=bucket, key="data/c.txt", data=b"created there")
    stats = push(s3_server, spec(bucket, Mode.RWD), root, manifest=tmp_path / "m")
    assert bucket_contents(s3_server, bucket) == {
        "data/a.txt": b"changed there",
        "data/b.txt": b"changed there too",
        "data/c.txt": b"created there",
    }
    assert stats.conflicts == ["data/a.txt", "data/b.txt", "data/c.txt"]
    assert (stats.transferred, stats.deleted, stats.ok) == (0, 0, True)
    again = push(s3_server, spec(bucket, Mode.RWD), root, manifest=tmp_path / "m")
    assert again.conflicts == stats.conflicts  # still reported: the base did not move


def test_changes_made_only_here_are_pushed_and_the_base_moves_forward(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    root = pulled(
        s3_server, bucket, tmp_path, **{"edit.txt": b"v1", "drop.txt": b"d", "same.txt": b"s"}
    )
    write(root / "edit.txt", b"v2, edited locally")
    (root / "drop.txt").unlink()
    write(root / "new.txt", b"new")
    first = push(s3_server, spec(bucket, Mode.RWD), root, manifest=tmp_path / "m")
    assert (first.transferred, first.deleted, first.skipped, first.conflicts) == (2, 1, 1, [])
    # The next push (a periodic checkpoint) starts from what this one pushed.
    write(root / "edit.txt", b"v3")
    second = push(s3_server, spec(bucket, Mode.RWD), root, manifest=tmp_path / "m")
    assert (second.transferred, second.skipped, second.conflicts) == (1, 2, [])
    assert bucket_contents(s3_server, bucket) == {
        "data/edit.txt": b"v3",
        "data/new.txt": b"new",
        "data/same.txt": b"s",
    }


def test_without_a_manifest_nothing_is_deleted_or_overwritten(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="data/remote-only", data=b"r")
    put_object(s3_server, bucket=bucket, key="data/both", data=b"remote")
    write(tmp_path / "both", b"local")
    write(tmp_path / "local-only", b"l")
    stats = push(s3_server, spec(bucket, Mode.RWD), tmp_path)
    assert (stats.transferred, stats.deleted, stats.conflicts) == (1, 0, ["data/both"])
    assert bucket_contents(s3_server, bucket) == {
        "data/both": b"remote",
        "data/local-only": b"l",
        "data/remote-only": b"r",
    }
