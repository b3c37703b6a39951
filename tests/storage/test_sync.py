"""pull() and push() against two S3 servers: the embedded s3rver and moto (tests/fixtures/s3.py)."""

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from storage.datastore import DatastoreConfig
from storage.embedded import EmbeddedS3
from storage.objects import create_bucket, iter_objects, put_object, read_object
from storage.sync import SyncStats, pull, push
from storage.volumes import Mode, VolumeSpec
from tests.fixtures.s3 import S3_SERVERS, each_s3_server

MiB = 1024 * 1024


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


def spec(bucket: str, prefix: str = "data", mode: Mode = Mode.RO) -> VolumeSpec:
    return VolumeSpec(
        bucket=bucket, alias="LOCAL", prefix=prefix, mount_path="/workspace/d", mode=mode
    )


def remote_keys(config: DatastoreConfig, bucket: str) -> list[str]:
    return [info.key for info in iter_objects(config, bucket=bucket)]


def write(path: Path, data: bytes, mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_pull_downloads_the_prefix(s3_server: DatastoreConfig, bucket: str, tmp_path: Path) -> None:
    for key, data in {
        "data/a.txt": b"a",
        "data/sub/b ü.txt": b"bb",
        "data/empty-folder/": b"",
        "data-other/no.txt": b"no",
        "data": b"not inside",
        "top.txt": b"no",
    }.items():
        put_object(s3_server, bucket=bucket, key=key, data=data)
    stats = pull(s3_server, spec(bucket), tmp_path / "d")
    assert stats == SyncStats("pull", total=2, processed=2, transferred=2, transferred_bytes=3)
    files = sorted(str(p.relative_to(tmp_path / "d")) for p in (tmp_path / "d").rglob("*"))
    assert files == ["a.txt", "empty-folder", "sub", "sub/b ü.txt"]
    assert (tmp_path / "d/sub/b ü.txt").read_bytes() == b"bb"
    [info] = [i for i in iter_objects(s3_server, bucket=bucket) if i.key == "data/a.txt"]
    assert int((tmp_path / "d/a.txt").stat().st_mtime) == int(info.last_modified.timestamp())


def test_pull_of_a_whole_bucket(s3_server: DatastoreConfig, bucket: str, tmp_path: Path) -> None:
    put_object(s3_server, bucket=bucket, key="x/y", data=b"1")
    put_object(s3_server, bucket=bucket, key="z", data=b"2")
    assert pull(s3_server, spec(bucket, prefix=""), tmp_path).transferred == 2
    assert (tmp_path / "x/y").read_bytes() == b"1"


def test_pull_is_incremental(s3_server: DatastoreConfig, bucket: str, tmp_path: Path) -> None:
    put_object(s3_server, bucket=bucket, key="data/one", data=b"1111")
    put_object(s3_server, bucket=bucket, key="data/two", data=b"2222")
    pull(s3_server, spec(bucket), tmp_path)
    again = pull(s3_server, spec(bucket), tmp_path)
    assert (again.skipped, again.transferred, again.transferred_bytes) == (2, 0, 0)
    time.sleep(1.1)  # a later LastModified for the changed object
    put_object(s3_server, bucket=bucket, key="data/two", data=b"2bis")  # same size
    third = pull(s3_server, spec(bucket), tmp_path)
    assert (third.skipped, third.transferred) == (1, 1)
    assert (tmp_path / "two").read_bytes() == b"2bis"


def test_pull_never_overwrites_newer_local_work_nor_deletes(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="data/ckpt", data=b"old")
    pull(s3_server, spec(bucket), tmp_path)
    write(tmp_path / "ckpt", b"newer local work", mtime=time.time() + 60)
    write(tmp_path / "local-only", b"mine")
    stats = pull(s3_server, spec(bucket), tmp_path)
    assert (stats.skipped, stats.transferred, stats.failed) == (1, 0, 0)
    assert (tmp_path / "ckpt").read_bytes() == b"newer local work"
    assert (tmp_path / "local-only").read_bytes() == b"mine"


def test_pull_refuses_keys_that_escape(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root).mkdir()
    (root / "link").symlink_to(outside)
    bad = ["data/../evil", "data/a//b", "data/./dot", "data/link/through-symlink"]
    for key in [*bad, "data/fine"]:
        put_object(s3_server, bucket=bucket, key=key, data=b"x")
    stats = pull(s3_server, spec(bucket), root)
    assert (stats.total, stats.transferred, stats.failed) == (5, 1, 4)
    assert sorted(f.key for f in stats.failures) == sorted(bad)
    assert all("unsafe key" in f.error for f in stats.failures)
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "evil").exists()
    assert sorted(p.name for p in root.iterdir()) == ["fine", "link"]


def test_pull_reports_a_directory_in_the_way(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="data/name", data=b"x")
    (tmp_path / "name").mkdir()
    stats = pull(s3_server, spec(bucket), tmp_path)
    assert stats.failed == 1
    assert "not a regular file" in stats.failures[0].error


def test_pull_of_a_missing_bucket_fails_cleanly(s3_server: DatastoreConfig, tmp_path: Path) -> None:
    stats = pull(s3_server, spec("no-such-bucket"), tmp_path)
    assert not stats.ok
    assert stats.failures[0].key == "no-such-bucket/data"
    assert "NoSuchBucket" in stats.failures[0].error


def test_push_uploads_new_and_changed_files_only(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    root, manifest = tmp_path / "root", tmp_path / "state/manifest.json"
    write(root / "a.txt", b"a")
    write(root / "deep/er/b.bin", b"b" * 1000)
    write(root / ".ajuste-x.partial", b"temporary download, never pushed")
    first = push(s3_server, spec(bucket, mode=Mode.RW), root, manifest=manifest)
    assert first == SyncStats("push", total=2, processed=2, transferred=2, transferred_bytes=1001)
    assert remote_keys(s3_server, bucket) == ["data/a.txt", "data/deep/er/b.bin"]
    second = push(s3_server, spec(bucket, mode=Mode.RW), root, manifest=manifest)
    assert (second.skipped, second.transferred) == (2, 0)
    write(root / "a.txt", b"A")  # same size, same second: the hash tells
    third = push(s3_server, spec(bucket, mode=Mode.RW), root, manifest=manifest)
    assert (third.skipped, third.transferred) == (1, 1)
    assert read_object(s3_server, bucket=bucket, key="data/a.txt", max_bytes=1) == b"A"


def test_pull_then_push_transfers_nothing(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    for index in range(5):
        put_object(s3_server, bucket=bucket, key=f"data/f{index}", data=b"x" * index)
    pull(s3_server, spec(bucket), tmp_path)
    stats = push(s3_server, spec(bucket, mode=Mode.RW), tmp_path)
    assert (stats.total, stats.skipped, stats.transferred) == (5, 5, 0)


def test_rw_never_deletes_and_rwd_mirrors_deletions(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    for key in ["data/keep", "data/gone", "data/old-folder/", "data/sub/gone2", "data/../weird"]:
        put_object(s3_server, bucket=bucket, key=key, data=b"r" if key[-1] != "/" else b"")
    put_object(s3_server, bucket=bucket, key="outside-prefix", data=b"o")
    root, manifest = tmp_path / "root", tmp_path / "manifest.json"
    pulled = pull(s3_server, spec(bucket), root, manifest=manifest)
    assert len(pulled.failures) == 1  # data/../weird cannot land locally
    (root / "gone").unlink()
    (root / "sub/gone2").unlink()
    (root / "old-folder").rmdir()
    rw = push(s3_server, spec(bucket, mode=Mode.RW), root, manifest=manifest)
    assert rw.deleted == 0
    assert len(remote_keys(s3_server, bucket)) == 6
    rwd = push(s3_server, spec(bucket, mode=Mode.RWD), root, manifest=manifest)
    assert (rwd.deleted, rwd.skipped, rwd.ok) == (3, 1, True)
    # "data/../weird" could never exist locally: it is left alone, as is the rest of the bucket
    assert remote_keys(s3_server, bucket) == ["data/../weird", "data/keep", "outside-prefix"]


def test_rwd_with_a_missing_directory_deletes_nothing(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="data/precious", data=b"p")
    stats = push(s3_server, spec(bucket, mode=Mode.RWD), tmp_path / "missing")
    assert not stats.ok
    assert "does not exist" in stats.failures[0].error
    assert remote_keys(s3_server, bucket) == ["data/precious"]


def test_push_of_a_read_only_volume_is_refused(s3_server: DatastoreConfig, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="read-only"):
        push(s3_server, spec("abc"), tmp_path)


def test_push_never_follows_symlinks(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    secret = write(tmp_path / "secret.txt", b"do not upload")
    root = tmp_path / "root"
    write(root / "real.txt", b"ok")
    (root / "link.txt").symlink_to(secret)
    (root / "linkdir").symlink_to(tmp_path)
    stats = push(s3_server, spec(bucket, mode=Mode.RWD), root)
    assert (stats.total, stats.transferred, stats.skipped) == (3, 1, 2)
    assert remote_keys(s3_server, bucket) == ["data/real.txt"]


def test_failing_files_are_reported_and_the_rest_goes(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    write(tmp_path / "good.txt", b"good")
    bad_name = os.fsencode(tmp_path) + b"/latin1-\xe9.txt"
    with open(bad_name, "wb") as stream:
        stream.write(b"not utf-8 name")
    deep = tmp_path.joinpath(*["d" * 200] * 5)
    write(deep / "too-long-key.txt", b"x")
    stats = push(s3_server, spec(bucket, mode=Mode.RWD), tmp_path)
    assert (stats.total, stats.transferred, stats.failed) == (3, 1, 2)
    errors = " | ".join(failure.error for failure in stats.failures)
    assert "the file name is not valid UTF-8" in errors
    assert "S3 allows 1024" in errors
    assert remote_keys(s3_server, bucket) == ["data/good.txt"]
    assert os.path.exists(bad_name)
    assert (deep / "too-long-key.txt").read_bytes() == b"x"


def test_large_files_go_multipart_both_ways(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    data = os.urandom(3 * MiB) * 7  # 21 MiB: two 16 MiB parts' worth
    write(tmp_path / "up/model.safetensors", data)
    seen: list[SyncStats] = []
    pushed = push(s3_server, spec(bucket, mode=Mode.RW), tmp_path / "up", progress=seen.append)
    assert (pushed.transferred, pushed.transferred_bytes) == (1, len(data))
    assert seen[-1] == pushed
    assert [s.processed for s in seen] == sorted(s.processed for s in seen)
    pulled = pull(s3_server, spec(bucket), tmp_path / "down", workers=2)
    assert (pulled.transferred, pulled.transferred_bytes) == (1, len(data))
    digest = hashlib.sha256((tmp_path / "down/model.safetensors").read_bytes()).digest()
    assert digest == hashlib.sha256(data).digest()
    assert push(s3_server, spec(bucket, mode=Mode.RW), tmp_path / "up").skipped == 1


@pytest.mark.slow
def test_an_interrupted_push_keeps_local_data_and_reports(
    s3_server_factory: Callable[..., EmbeddedS3], tmp_path: Path
) -> None:
    server = s3_server_factory(tmp_path / "s3")
    config = server.config()
    create_bucket(config, bucket="ckpt")
    for index in range(12):
        write(tmp_path / f"local/step-{index:02}.bin", bytes([index]) * 50_000)

    def stop_midway(stats: SyncStats) -> None:
        if stats.transferred >= 3 and server.running():
            server.stop()

    stats = push(
        config, spec("ckpt", mode=Mode.RWD), tmp_path / "local", workers=2, progress=stop_midway
    )
    assert not stats.ok
    assert stats.transferred >= 3
    assert stats.failed >= 1
    assert stats.failed + stats.transferred == 12
    assert all("step-" in failure.key for failure in stats.failures)
    assert len(list((tmp_path / "local").iterdir())) == 12  # local data untouched
    restarted = s3_server_factory(tmp_path / "s3")
    config = restarted.config()
    retry = push(config, spec("ckpt", mode=Mode.RWD), tmp_path / "local")
    assert retry.ok
    assert retry.transferred == stats.failed
    assert retry.skipped == stats.transferred
    assert len(remote_keys(config, "ckpt")) == 12


def test_a_failing_progress_callback_does_not_fail_the_sync(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    write(tmp_path / "f", b"data")

    def broken(stats: SyncStats) -> None:
        raise BrokenPipeError("the reader went away")

    stats = push(s3_server, spec(bucket, mode=Mode.RW), tmp_path, progress=broken)
    assert (stats.ok, stats.transferred) == (True, 1)
