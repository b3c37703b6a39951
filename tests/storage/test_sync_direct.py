"""The sync engine's plain signed requests (storage/sync/direct.py) against real S3 servers:
s3rver checks every signature, moto is an S3 written independently of ours. What they must
give is exactly what boto3 gives; where they fail, the engine's boto3 path takes over."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from storage.datastore import DatastoreConfig
from storage.objects import iter_objects, put_object, read_object
from storage.sync import pull, push
from storage.sync.direct import Direct, DirectError
from storage.sync.engine import _Folders
from storage.sync.local import UnsafeKeyError
from storage.volumes import Mode, VolumeSpec
from tests.fixtures.s3 import S3_SERVERS, SIGNATURES_CHECKED, each_s3_server

# Keys whose signature depends on how each character is encoded.
ODD_KEYS = [
    "data/plain.txt",
    "data/space and ü é/ß.txt",
    "data/plus+percent%25 tilde~star*.bin",
    "data/quote'paren(1)&=;,$@!.txt",
    "data/日本語/файл.txt",
]


def md5(data: bytes) -> hashlib._Hash:
    return hashlib.md5(data, usedforsecurity=False)


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


def spec(bucket: str, mode: Mode = Mode.RW) -> VolumeSpec:
    return VolumeSpec(bucket=bucket, alias="LOCAL", prefix="data", mount_path="/w/d", mode=mode)


def test_listing_and_gets_match_boto3_for_odd_keys(s3_server: DatastoreConfig, bucket: str) -> None:
    for index, key in enumerate(ODD_KEYS):
        put_object(s3_server, bucket=bucket, key=key, data=f"content {index}".encode())
    put_object(s3_server, bucket=bucket, key="other/no", data=b"no")
    direct = Direct(s3_server)
    try:
        listed = direct.list_objects(bucket, "data/")
        assert [(o.key, o.size, o.etag) for o in listed] == [
            (o.key, o.size, o.etag) for o in iter_objects(s3_server, bucket=bucket, prefix="data/")
        ]
        for info in listed:
            blocks: list[bytes] = []
            assert direct.get_object(bucket, info.key, blocks.append) == info.size
            assert b"".join(blocks) == read_object(
                s3_server, bucket=bucket, key=info.key, max_bytes=1 << 20
            )
    finally:
        direct.close()


@pytest.mark.slow
def test_a_listing_of_many_pages(s3_server: DatastoreConfig, bucket: str) -> None:
    keys = sorted(f"data/{index:04}" for index in range(1100))
    for key in keys:
        put_object(s3_server, bucket=bucket, key=key, data=b"x")
    direct = Direct(s3_server)
    try:
        assert [o.key for o in direct.list_objects(bucket, "data/")] == keys
    finally:
        direct.close()


@SIGNATURES_CHECKED
def test_a_wrong_secret_is_refused_not_trusted(s3_server: DatastoreConfig, bucket: str) -> None:
    put_object(s3_server, bucket=bucket, key="data/a", data=b"a")
    wrong = Direct(DatastoreConfig("LOCAL", s3_server.endpoint_url, "us-east-1", "x", "y"))
    with pytest.raises(DirectError, match="403"):
        wrong.list_objects(bucket, "data/")
    with pytest.raises(DirectError, match="403"):
        wrong.get_object(bucket, "data/a", lambda block: None)
    with pytest.raises(DirectError, match="403"):
        wrong.put_object(bucket, "data/b", b"b", md5(b"b").digest())
    assert [o.key for o in iter_objects(s3_server, bucket=bucket)] == ["data/a"]


def test_pull_and_push_round_trip_odd_keys(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    contents = {key: os.urandom(3000) for key in ODD_KEYS}
    for key, data in contents.items():
        put_object(s3_server, bucket=bucket, key=key, data=data)
    stats = pull(s3_server, spec(bucket), tmp_path / "d")
    assert (stats.ok, stats.transferred) == (True, len(ODD_KEYS))
    for key, data in contents.items():
        path = tmp_path / "d" / key.removeprefix("data/")
        assert path.read_bytes() == data
        assert path.stat().st_mode & 0o777 == 0o600  # as tempfile.mkstemp made them
    assert not [p for p in (tmp_path / "d").rglob("*.partial")]
    shutil.copytree(tmp_path / "d", tmp_path / "copy")
    stats = push(s3_server, VolumeSpec(bucket, "LOCAL", "copy", "/w", Mode.RW), tmp_path / "copy")
    assert (stats.ok, stats.transferred) == (True, len(ODD_KEYS))
    for key, data in contents.items():
        copied = "copy/" + key.removeprefix("data/")
        assert read_object(s3_server, bucket=bucket, key=copied, max_bytes=1 << 20) == data


def test_an_object_gone_after_the_listing_fails_through_boto3(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    """The plain GET answers 404; the engine redoes it through boto3, whose message is kept."""
    from storage.objects import delete_objects

    put_object(s3_server, bucket=bucket, key="data/kept", data=b"k")
    put_object(s3_server, bucket=bucket, key="data/gone", data=b"g")

    def remove_after_listing(stats: object) -> None:
        delete_objects(s3_server, bucket=bucket, keys=["data/gone"])

    stats = pull(s3_server, spec(bucket), tmp_path, progress=remove_after_listing)
    assert (stats.transferred, stats.failed) == (1, 1)
    assert stats.failures[0].key == "data/gone"
    assert "NoSuchKey" in stats.failures[0].error or "not found" in stats.failures[0].error.lower()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]


def test_a_folder_swapped_for_a_link_after_its_check_leads_nowhere(tmp_path: Path) -> None:
    """Files are written through folder descriptors opened without following links: a folder
    replaced by a symlink between the key's check and the write is refused."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    folders = _Folders(root)
    try:
        parents, name = folders.locate("sub/file")
        assert (parents, name) == (("sub",), "file")
        (root / "sub").rmdir()
        (root / "sub").symlink_to(outside)
        with pytest.raises(UnsafeKeyError, match="became a symlink"):
            folders.open(parents, "sub/file")
    finally:
        folders.close()
    assert list(outside.iterdir()) == []


def test_a_proxy_for_the_store_leaves_requests_to_boto3(
    s3_server: DatastoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert not Direct(s3_server).usable
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    assert Direct(s3_server).usable
