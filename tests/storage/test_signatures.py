"""SigV4 as two implementations of the check see it: the embedded s3rver and moto with its IAM
authentication on (`signing_moto`, tests/fixtures/s3.py), which recomputes each request's
signature with botocore's signer from what it received. What Ajuste signs (through boto3, and
by itself in storage/sync/direct.py) is accepted; a wrong secret, an unknown key or a request
changed after it was signed is refused, and nothing is written."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.errors import AccessDenied
from storage.objects import iter_objects, put_object, read_object
from storage.sync import pull, push
from storage.sync.direct import Direct, DirectError
from storage.volumes import Mode, VolumeSpec
from tests.fixtures.s3 import SIGNATURES_CHECKED, each_s3_server

# Keys whose canonical request depends on how each character is encoded.
ODD_KEYS = [
    "data/plain.txt",
    "data/space and ü é/ß.txt",
    "data/plus+percent%25 tilde~star*.bin",
    "data/quote'paren(1)&=;,$@!.txt",
    "data/日本語/файл.txt",
]


@pytest.fixture
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


def keys(config: DatastoreConfig, bucket: str) -> list[str]:
    return [info.key for info in iter_objects(config, bucket=bucket)]


@pytest.fixture
def direct(s3_server: DatastoreConfig) -> Iterator[Direct]:
    client = Direct(s3_server)
    yield client
    client.close()


@SIGNATURES_CHECKED
def test_the_sync_engines_own_signatures_are_accepted(
    s3_server: DatastoreConfig, bucket: str, direct: Direct
) -> None:
    """storage/sync/direct.py signs without botocore: the server's own recomputation agrees
    for keys whose encoding is easy to get wrong, in a listing, a GET and a PUT."""
    for index, key in enumerate(ODD_KEYS):
        data = f"content {index}".encode()
        etag = direct.put_object(
            bucket, key, data, hashlib.md5(data, usedforsecurity=False).digest()
        )
        assert etag == hashlib.md5(data, usedforsecurity=False).hexdigest()
    assert [o.key for o in direct.list_objects(bucket, "data/")] == sorted(ODD_KEYS)
    for index, key in enumerate(ODD_KEYS):
        blocks: list[bytes] = []
        direct.get_object(bucket, key, blocks.append)
        assert b"".join(blocks) == f"content {index}".encode()


@SIGNATURES_CHECKED
def test_a_wrong_secret_or_an_unknown_key_is_refused_by_every_path(
    s3_server: DatastoreConfig, bucket: str
) -> None:
    put_object(s3_server, bucket=bucket, key="data/a", data=b"a")
    for wrong in (
        replace(s3_server, secret_key="not-the-secret"),
        replace(s3_server, access_key="AKIANOBODY"),
    ):
        with pytest.raises(AccessDenied):
            put_object(wrong, bucket=bucket, key="data/b", data=b"b")
        with pytest.raises(AccessDenied):
            read_object(wrong, bucket=bucket, key="data/a", max_bytes=1)
        plain = Direct(wrong)
        try:
            with pytest.raises(DirectError, match="403"):
                plain.list_objects(bucket, "data/")
            with pytest.raises(DirectError, match="403"):
                plain.put_object(
                    bucket, "data/c", b"c", hashlib.md5(b"c", usedforsecurity=False).digest()
                )
        finally:
            plain.close()
    assert keys(s3_server, bucket) == ["data/a"]


@SIGNATURES_CHECKED
def test_a_request_changed_after_signing_is_refused(
    s3_server: DatastoreConfig, bucket: str
) -> None:
    """boto3 signs, then the request is changed on its way (botocore's `before-send`, after
    the signature): another key, another signed header, another query. Each is refused."""
    client = make_s3_client(replace(s3_server, alias="TAMPERED"))
    tampering: dict[str, Any] = {}

    def change(request: Any, **_: Any) -> None:
        tampering["change"](request)

    client.meta.events.register("before-send.s3", change)
    changes = {
        "key": lambda r: setattr(r, "url", r.url.replace("/meant.txt", "/other.txt")),
        "header": lambda r: r.headers.__setitem__("Content-Type", "text/html"),
        "query": lambda r: setattr(r, "url", r.url + "&prefix=other"),
    }
    for what, how in changes.items():
        tampering["change"] = how
        with pytest.raises(client.exceptions.ClientError) as refused:
            if what == "query":
                client.list_objects_v2(Bucket=bucket)
            else:
                client.put_object(
                    Bucket=bucket, Key="meant.txt", Body=b"x", ContentType="text/plain"
                )
        assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch", what
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    tampering["change"] = lambda r: None  # the same client, untouched: accepted
    client.put_object(Bucket=bucket, Key="meant.txt", Body=b"x", ContentType="text/plain")
    assert keys(s3_server, bucket) == ["meant.txt"]


@SIGNATURES_CHECKED
def test_a_sync_with_a_wrong_secret_moves_nothing(
    s3_server: DatastoreConfig, bucket: str, tmp_path: Path
) -> None:
    put_object(s3_server, bucket=bucket, key="data/remote.txt", data=b"r")
    (tmp_path / "up").mkdir()
    (tmp_path / "up/local.txt").write_bytes(b"l")
    wrong = replace(s3_server, secret_key="not-the-secret")
    spec = VolumeSpec(bucket, "LOCAL", "data", "/workspace/d", Mode.RW)
    pulled = pull(wrong, spec, tmp_path / "down")
    assert not pulled.ok and pulled.transferred == 0
    assert not (tmp_path / "down/remote.txt").exists()
    pushed = push(wrong, spec, tmp_path / "up")
    assert not pushed.ok and pushed.transferred == 0
    assert keys(s3_server, bucket) == ["data/remote.txt"]
    right = push(s3_server, spec, tmp_path / "up")  # the same push, signed right: it goes
    assert (right.ok, right.transferred) == (True, 1)
    assert keys(s3_server, bucket) == ["data/local.txt", "data/remote.txt"]
