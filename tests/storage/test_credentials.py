"""Credentials that reach only some buckets: the embedded store's scoped keys (against the real
s3rver), credential files as pods read them, and STS AssumeRole with a session policy (the
policy as a pure function, the call against moto's STS)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from storage import credentials, objects, presign
from storage.client import make_s3_client, make_sts_client
from storage.credentials import CredentialError
from storage.datastore import DatastoreConfig
from storage.embedded import EmbeddedS3
from storage.errors import AccessDenied, BucketNotFound, s3_errors

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def two_buckets(s3_server: DatastoreConfig) -> Iterator[tuple[str, str]]:
    """Project A's bucket (with one object) and project B's (with a secret)."""
    names = (f"a-{uuid.uuid4().hex[:12]}", f"b-{uuid.uuid4().hex[:12]}")
    for name in names:
        objects.create_bucket(s3_server, bucket=name)
    objects.put_object(s3_server, bucket=names[0], key="data/a.txt", data=b"project a")
    objects.put_object(s3_server, bucket=names[1], key="secret.txt", data=b"project b")
    yield names
    for name in names:
        with contextlib.suppress(BucketNotFound):
            objects.delete_bucket(s3_server, bucket=name, force=True)


@pytest.fixture
def scoped(s3_server: DatastoreConfig, two_buckets: tuple[str, str]) -> Iterator[DatastoreConfig]:
    """A key pair granted on project A's bucket only."""
    access_key, secret_key = credentials.new_key_pair()
    credentials.embedded_grant(
        s3_server, access_key=access_key, secret_key=secret_key, buckets=[two_buckets[0]]
    )
    yield replace(s3_server, access_key=access_key, secret_key=secret_key)
    credentials.embedded_revoke(s3_server, access_key=access_key)


def denied(call: Callable[[], object]) -> AccessDenied:
    with pytest.raises(AccessDenied) as raised:
        call()
    return raised.value


def test_a_scoped_key_works_in_its_own_bucket(
    scoped: DatastoreConfig, two_buckets: tuple[str, str]
) -> None:
    mine = two_buckets[0]
    assert [o.key for o in objects.iter_objects(scoped, bucket=mine)] == ["data/a.txt"]
    assert objects.read_object(scoped, bucket=mine, key="data/a.txt", max_bytes=100) == (
        b"project a"
    )
    objects.put_object(scoped, bucket=mine, key="out/b.txt", data=b"written")
    objects.copy_object(scoped, bucket=mine, source_key="out/b.txt", dest_key="out/c.txt")
    objects.head_bucket(scoped, bucket=mine)
    objects.delete_objects(scoped, bucket=mine, keys=["out/b.txt"])
    # a multipart upload, completed and aborted
    client = make_s3_client(scoped)
    upload = client.create_multipart_upload(Bucket=mine, Key="big.bin")["UploadId"]
    part = client.upload_part(
        Bucket=mine, Key="big.bin", UploadId=upload, PartNumber=1, Body=b"x" * 1024
    )
    client.complete_multipart_upload(
        Bucket=mine,
        Key="big.bin",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    other = client.create_multipart_upload(Bucket=mine, Key="aborted.bin")["UploadId"]
    client.abort_multipart_upload(Bucket=mine, Key="aborted.bin", UploadId=other)
    keys = [o.key for o in objects.iter_objects(scoped, bucket=mine)]
    assert keys == ["big.bin", "data/a.txt", "out/c.txt"]


def test_a_scoped_key_cannot_reach_another_bucket(
    s3_server: DatastoreConfig, scoped: DatastoreConfig, two_buckets: tuple[str, str]
) -> None:
    mine, theirs = two_buckets
    denied(lambda: objects.list_objects(scoped, bucket=theirs))
    denied(lambda: objects.read_object(scoped, bucket=theirs, key="secret.txt", max_bytes=100))
    denied(lambda: objects.put_object(scoped, bucket=theirs, key="x", data=b"x"))
    denied(lambda: objects.delete_object(scoped, bucket=theirs, key="secret.txt"))
    denied(lambda: objects.head_object(scoped, bucket=theirs, key="secret.txt"))
    # a copy into its own bucket, from theirs
    denied(
        lambda: objects.copy_object(
            scoped, bucket=mine, source_bucket=theirs, source_key="secret.txt", dest_key="stolen"
        )
    )
    client = make_s3_client(scoped)

    def start_upload() -> None:
        with s3_errors(bucket=theirs):
            client.create_multipart_upload(Bucket=theirs, Key="k")

    denied(start_upload)
    # nor the service: no bucket listing, no new bucket, no deleting or reconfiguring its own
    denied(lambda: objects.list_buckets(scoped))
    denied(lambda: objects.create_bucket(scoped, bucket=f"c-{uuid.uuid4().hex[:12]}"))
    denied(lambda: objects.delete_bucket(scoped, bucket=mine))
    denied(lambda: objects.set_bucket_cors(scoped, bucket=mine, origins=["https://evil.example"]))
    # a URL it presigns for their bucket is refused as well
    url = presign.presign_get(scoped, bucket=theirs, key="secret.txt")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(url, timeout=10)  # noqa: S310 - our loopback store
    assert raised.value.code == 403
    # and nothing of theirs changed
    assert objects.read_object(s3_server, bucket=theirs, key="secret.txt", max_bytes=100) == (
        b"project b"
    )
    assert [o.key for o in objects.iter_objects(s3_server, bucket=mine)] == ["data/a.txt"]


def test_a_revoked_key_is_refused(
    s3_server: DatastoreConfig, scoped: DatastoreConfig, two_buckets: tuple[str, str]
) -> None:
    mine = two_buckets[0]
    assert credentials.embedded_keys(s3_server)[scoped.access_key] == (mine,)
    assert credentials.embedded_revoke(s3_server, access_key=scoped.access_key) is True
    assert credentials.embedded_revoke(s3_server, access_key=scoped.access_key) is False
    error = denied(lambda: objects.list_objects(scoped, bucket=mine))
    assert error.code == "InvalidAccessKeyId"
    assert scoped.access_key not in credentials.embedded_keys(s3_server)


def test_a_narrowed_grant_takes_effect_at_once(
    s3_server: DatastoreConfig, scoped: DatastoreConfig, two_buckets: tuple[str, str]
) -> None:
    """The bucket a project deletes leaves its key (the name may go to another project)."""
    mine, theirs = two_buckets
    credentials.embedded_grant(
        s3_server, access_key=scoped.access_key, secret_key=scoped.secret_key, buckets=[theirs]
    )
    denied(lambda: objects.list_objects(scoped, bucket=mine))
    assert [o.key for o in objects.iter_objects(scoped, bucket=theirs)] == ["secret.txt"]


def test_only_the_root_key_manages_keys(
    s3_server: DatastoreConfig, scoped: DatastoreConfig, two_buckets: tuple[str, str]
) -> None:
    theirs = two_buckets[1]
    with pytest.raises(AccessDenied):
        credentials.embedded_grant(
            scoped, access_key=scoped.access_key, secret_key=scoped.secret_key, buckets=[theirs]
        )
    with pytest.raises(AccessDenied):
        credentials.embedded_keys(scoped)
    wrong = replace(s3_server, secret_key="not-the-root-secret")
    with pytest.raises(AccessDenied):
        credentials.embedded_keys(wrong)
    with pytest.raises(CredentialError, match="root key"):
        credentials.embedded_grant(
            s3_server, access_key=s3_server.access_key, secret_key="x" * 20, buckets=[theirs]
        )
    with pytest.raises(CredentialError, match="buckets must be"):
        credentials.embedded_grant(
            s3_server, access_key="ajp-valid-key", secret_key="x" * 20, buckets=["../x"]
        )
    # anonymous
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(s3_server.endpoint_url + "/_ajuste/keys", timeout=10)  # noqa: S310
    assert raised.value.code == 403
    assert credentials.embedded_keys(s3_server)[scoped.access_key] == (two_buckets[0],)


@pytest.mark.slow
def test_scoped_keys_survive_a_restart(
    s3_server_factory: Callable[..., EmbeddedS3], tmp_path: Path
) -> None:
    server = s3_server_factory(tmp_path / "kept")
    root = server.config()
    objects.create_bucket(root, bucket="kept-bucket")
    access_key, secret_key = credentials.new_key_pair()
    credentials.embedded_grant(
        root, access_key=access_key, secret_key=secret_key, buckets=["kept-bucket"]
    )
    keys_file = tmp_path / "kept" / ".ajuste-keys.json"
    assert keys_file.stat().st_mode & 0o777 == 0o600
    server.stop()
    again = s3_server_factory(tmp_path / "kept")
    scoped = replace(again.config(), access_key=access_key, secret_key=secret_key)
    assert objects.list_objects(scoped, bucket="kept-bucket").objects == []
    assert [b.name for b in objects.list_buckets(again.config())] == ["kept-bucket"]


# ---- credential files, as pods read them -------------------------------------------------


def test_credential_files_round_trip(tmp_path: Path) -> None:
    config = DatastoreConfig(
        "gra-2",
        "http://panel:9000",
        "gra",
        "AK",
        "SK",
        pod_endpoint_url="http://s3.cluster:9000",
        session_token="TOKEN",
    )
    files = config.to_files(pod=True)
    assert files == {
        "GRA_2.endpoint_url": "http://s3.cluster:9000",
        "GRA_2.region": "gra",
        "GRA_2.access_key": "AK",
        "GRA_2.secret_key": "SK",
        "GRA_2.session_token": "TOKEN",
    }
    for name, value in files.items():
        (tmp_path / name).write_text(value + "\n")
    read = DatastoreConfig.from_env("gra-2", {"AJUSTE_DATASTORE_DIR": str(tmp_path)})
    assert read == replace(config, endpoint_url="http://s3.cluster:9000", pod_endpoint_url="")
    assert "SK" not in repr(read) and "TOKEN" not in repr(read)
    # the directory wins over variables: a pod's environment holds none
    environ = {"AJUSTE_DATASTORE_DIR": str(tmp_path), **replace(config, alias="GRA_2").to_env()}
    assert DatastoreConfig.from_env("GRA-2", environ).access_key == "AK"
    (tmp_path / "GRA_2.secret_key").unlink()
    with pytest.raises(KeyError, match=r"GRA_2\.secret_key"):
        DatastoreConfig.from_env("gra-2", {"AJUSTE_DATASTORE_DIR": str(tmp_path)})


def test_the_sync_engine_reads_scoped_credentials_from_files(
    scoped: DatastoreConfig, two_buckets: tuple[str, str], tmp_path: Path
) -> None:
    """`python -m storage.sync` as a pod runs it: no credential in its environment, the
    Secret's files in a directory; it pulls its own bucket and is refused another's."""
    mine, theirs = two_buckets
    secrets_dir = tmp_path / "datastores"
    secrets_dir.mkdir()
    for name, value in scoped.to_files().items():
        (secrets_dir / name).write_text(value)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJUSTE_DATASTORE_")}
    env["AJUSTE_DATASTORE_DIR"] = str(secrets_dir)

    def sync(spec: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "storage.sync", "pull", spec, "--root", str(tmp_path)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    own = sync(f"{mine}@LOCAL/data:/workspace/mine:ro")
    assert own.returncode == 0, own.stderr
    assert (tmp_path / "workspace" / "mine" / "a.txt").read_bytes() == b"project a"
    other = sync(f"{theirs}@LOCAL:/workspace/theirs:ro")
    assert other.returncode != 0
    assert "AccessDenied" in other.stdout + other.stderr
    assert not (tmp_path / "workspace" / "theirs" / "secret.txt").exists()


# ---- STS -----------------------------------------------------------------------------------


def test_session_policy_allows_only_the_listed_buckets() -> None:
    assert credentials.session_policy(["b-data", "a-models", "b-data"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListTheseBuckets",
                "Effect": "Allow",
                "Action": [
                    "s3:ListBucket",
                    "s3:GetBucketLocation",
                    "s3:ListBucketMultipartUploads",
                ],
                "Resource": ["arn:aws:s3:::a-models", "arn:aws:s3:::b-data"],
            },
            {
                "Sid": "ObjectsInTheseBuckets",
                "Effect": "Allow",
                "Action": [
                    "s3:GetObject",
                    "s3:PutObject",
                    "s3:DeleteObject",
                    "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts",
                ],
                "Resource": ["arn:aws:s3:::a-models/*", "arn:aws:s3:::b-data/*"],
            },
        ],
    }
    china = credentials.session_policy(["x-y-z"], partition="aws-cn")
    assert china["Statement"][1]["Resource"] == ["arn:aws-cn:s3:::x-y-z/*"]  # type: ignore[index]
    with pytest.raises(ValueError, match="at least one bucket"):
        credentials.session_policy([])


def test_a_session_policy_over_the_sts_limit_is_refused_with_the_reason() -> None:
    many = [f"bucket-{i:03d}-{'x' * 40}" for i in range(30)]
    with pytest.raises(CredentialError, match="over the 2048 STS accepts"):
        credentials.session_policy_json(many)
    assert len(credentials.session_policy_json(many[:5])) <= 2048


def test_role_arn_and_sts_endpoint() -> None:
    assert credentials.role_partition("arn:aws:iam::123456789012:role/ajuste-pods") == "aws"
    assert credentials.role_partition("arn:aws-cn:iam::123456789012:role/a/b") == "aws-cn"
    with pytest.raises(ValueError, match="not a role ARN"):
        credentials.role_partition("arn:aws:iam::123456789012:user/alice")
    aws = DatastoreConfig("S3", "https://s3.eu-west-3.amazonaws.com", "eu-west-3", "a", "b")
    minio = DatastoreConfig("M", "http://minio:9000", "us-east-1", "a", "b")
    assert credentials.sts_endpoint(aws) is None
    assert credentials.sts_endpoint(minio) == "http://minio:9000"
    assert credentials.sts_endpoint(aws, "https://sts.example") == "https://sts.example"


def test_assume_role_sends_the_session_policy_and_returns_session_keys(
    moto_s3: DatastoreConfig,
) -> None:
    """Against moto's STS (the same server as its S3): the request carries the role, the
    policy limited to the project's buckets and the duration; the answer is a key pair with a
    session token, usable on S3."""
    sent: list[dict[str, list[str]]] = []

    def capture(request: Any, **_: Any) -> None:
        body = request.body
        sent.append(urllib.parse.parse_qs(body.decode() if isinstance(body, bytes) else body))

    client = make_sts_client(moto_s3, endpoint_url=moto_s3.endpoint_url)
    client.meta.events.register("before-send.sts.AssumeRole", capture)
    try:
        issued = credentials.assume_role(
            moto_s3,
            role_arn="arn:aws:iam::123456789012:role/ajuste-pods",
            session_name="ajuste vision/GRA",
            buckets=["vision-data", "vision-out"],
            duration_s=7200,
        )
    finally:
        client.meta.events.unregister("before-send.sts.AssumeRole", capture)
    (request,) = sent
    assert request["Action"] == ["AssumeRole"]
    assert request["RoleArn"] == ["arn:aws:iam::123456789012:role/ajuste-pods"]
    assert request["RoleSessionName"] == ["ajuste-vision-GRA"]
    assert request["DurationSeconds"] == ["7200"]
    policy = json.loads(request["Policy"][0])
    assert policy == credentials.session_policy(["vision-data", "vision-out"])
    scoped = issued.config
    assert scoped.access_key != moto_s3.access_key and scoped.session_token
    assert scoped.endpoint_url == moto_s3.endpoint_url
    assert issued.expires_at.tzinfo is not None
    # the session's keys sign S3 requests (moto checks no policy: AWS, MinIO and Ceph do)
    objects.create_bucket(moto_s3, bucket="vision-data")
    try:
        assert objects.list_objects(scoped, bucket="vision-data").objects == []
    finally:
        objects.delete_bucket(moto_s3, bucket="vision-data", force=True)


def test_assume_role_refuses_bad_settings_before_calling(moto_s3: DatastoreConfig) -> None:
    with pytest.raises(CredentialError, match="not a role ARN"):
        credentials.assume_role(moto_s3, role_arn="ajuste-pods", session_name="s", buckets=["b"])
    with pytest.raises(ValueError, match="duration"):
        credentials.assume_role(
            moto_s3,
            role_arn="arn:aws:iam::123456789012:role/r",
            session_name="s",
            buckets=["b"],
            duration_s=60,
        )
