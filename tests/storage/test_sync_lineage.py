"""The pull's lineage: what a run read, written into its output volume, digest per volume, object
versions where the bucket keeps them, and the keys that changed between two runs' inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.objects import put_object, read_object
from storage.sync.lineage import (
    LineageError,
    Pulled,
    changed_keys,
    digest,
    read_lineage,
)
from tests.fixtures.s3 import S3_SERVERS, each_s3_server
from tests.storage.test_sync_cli import run_sync


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


def pull_lineage(config: DatastoreConfig, bucket: str, root: Path) -> list[dict[str, Any]]:
    data = f"{bucket}@LOCAL/chat:/workspace/data"
    output = f"{bucket}@LOCAL/out/{root.name}:/workspace/output:rw"
    pulled = run_sync(config, "pull", data, output, "--root", str(root))
    assert pulled.returncode == 0, pulled.stderr
    text = (root / "workspace/output/.ajuste/lineage.json").read_text()
    return read_lineage(text)


def test_a_changed_object_changes_the_digest_and_is_named(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="chat/train.jsonl", data=b'{"text": "a"}\n')
    put_object(s3_server, bucket=bucket, key="chat/eval.jsonl", data=b'{"text": "b"}\n')
    first = pull_lineage(s3_server, bucket, tmp_path / "run1")
    (volume,) = first  # the output volume itself is not an input
    assert volume["mount_path"] == "/workspace/data"
    assert sorted(volume["objects"]) == ["chat/eval.jsonl", "chat/train.jsonl"]
    assert volume["objects"]["chat/train.jsonl"]["size"] == 14
    assert volume["digest"].startswith("sha256:")
    assert pull_lineage(s3_server, bucket, tmp_path / "again")[0]["digest"] == volume["digest"]

    put_object(s3_server, bucket=bucket, key="chat/train.jsonl", data=b'{"text": "c"}\n')
    second = pull_lineage(s3_server, bucket, tmp_path / "run2")
    assert second[0]["digest"] != volume["digest"]
    (changes,) = changed_keys(first, second)
    assert (changes.added, changes.removed, changes.changed) == ((), (), ("chat/train.jsonl",))


def test_the_lineage_travels_to_the_bucket_with_the_push(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="chat/train.jsonl", data=b"x\n")
    read = pull_lineage(s3_server, bucket, tmp_path / "run")
    output = f"{bucket}@LOCAL/out/run:/workspace/output:rw"
    pushed = run_sync(s3_server, "push", output, "--root", str(tmp_path / "run"))
    assert pushed.returncode == 0, pushed.stderr
    stored = read_object(
        s3_server, bucket=bucket, key="out/run/.ajuste/lineage.json", max_bytes=1 << 20
    )
    assert read_lineage(stored) == read


def test_without_a_writable_output_volume_nothing_is_written(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="chat/train.jsonl", data=b"x\n")
    specs = [f"{bucket}@LOCAL/chat:/workspace/data", f"{bucket}@LOCAL/o:/workspace/output:ro"]
    pulled = run_sync(s3_server, "pull", *specs, "--root", str(tmp_path))
    assert pulled.returncode == 0, pulled.stderr
    assert not list(tmp_path.rglob("lineage.json"))


def test_a_versioned_bucket_records_each_objects_version(
    moto_s3: DatastoreConfig, tmp_path: Path
) -> None:
    client = make_s3_client(moto_s3)
    client.create_bucket(Bucket="versioned")
    client.put_bucket_versioning(Bucket="versioned", VersioningConfiguration={"Status": "Enabled"})
    put_object(moto_s3, bucket="versioned", key="chat/a.jsonl", data=b"one\n")
    put_object(moto_s3, bucket="versioned", key="chat/a.jsonl", data=b"two\n")
    (volume,) = pull_lineage(moto_s3, "versioned", tmp_path / "run")
    newest = client.head_object(Bucket="versioned", Key="chat/a.jsonl")["VersionId"]
    assert volume["versioned"] is True
    assert volume["objects"]["chat/a.jsonl"]["version"] == newest


def test_the_digest_covers_key_etag_size_and_version() -> None:
    base = {"a": Pulled("e1", 1), "b": Pulled("e2", 2)}
    assert digest(base) == digest(dict(reversed(base.items())))
    for other in (
        {"a": Pulled("e1", 1), "c": Pulled("e2", 2)},
        {"a": Pulled("e9", 1), "b": Pulled("e2", 2)},
        {"a": Pulled("e1", 3), "b": Pulled("e2", 2)},
        {"a": Pulled("e1", 1, "v2"), "b": Pulled("e2", 2)},
    ):
        assert digest(other) != digest(base)


def _document(**volume: Any) -> str:
    entry = {
        "spec": "b@L/chat:/workspace/data:ro",
        "bucket": "b",
        "alias": "L",
        "prefix": "chat",
        "mount_path": "/workspace/data",
        "versioned": False,
        "objects": {"chat/a": {"etag": "e", "size": 1, "version": None}},
    }
    entry["digest"] = digest({"chat/a": Pulled("e", 1)})
    return json.dumps({"version": 1, "volumes": [entry | volume]})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ('{"version": 2, "volumes": []}', "unknown format"),
        (_document(digest="sha256:0"), "does not match"),
        (_document(objects={"chat/a": {"etag": "e", "size": -1}}), "has no size"),
        (_document(objects={"chat/a": {"size": 1}}), "has no ETag"),
        (_document(bucket=None), "lacks its spec"),
    ],
)
def test_a_lineage_file_that_is_not_one_is_refused(text: str, message: str) -> None:
    """It lies in a user's bucket: the panel believes only a consistent document."""
    with pytest.raises(LineageError, match=message):
        read_lineage(text)
    assert read_lineage(_document())[0]["objects"] == {
        "chat/a": {"etag": "e", "size": 1, "version": None}
    }
