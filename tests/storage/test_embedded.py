"""The embedded object store itself: restarts, credentials, its own error messages."""

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from storage.embedded import EmbeddedS3, EmbeddedS3Error, start_embedded_s3
from storage.errors import AccessDenied
from storage.objects import create_bucket, list_buckets, put_object, read_object


@pytest.mark.slow
def test_data_survives_a_restart(
    s3_server_factory: Callable[..., EmbeddedS3], tmp_path: Path
) -> None:
    first = s3_server_factory(tmp_path / "data")
    config = first.config()
    create_bucket(config, bucket="keep")
    put_object(config, bucket="keep", key="dir/ü.txt", data=b"kept")
    first.stop()
    assert not first.running()
    second = s3_server_factory(tmp_path / "data")
    config = second.config()
    assert [bucket.name for bucket in list_buckets(config)] == ["keep"]
    assert read_object(config, bucket="keep", key="dir/ü.txt", max_bytes=10) == b"kept"


def test_anonymous_requests_are_refused(embedded_s3: EmbeddedS3) -> None:
    assert httpx.get(embedded_s3.endpoint_url + "/").status_code == 403
    assert httpx.put(embedded_s3.endpoint_url + "/anon-bucket").status_code == 403
    assert "anon-bucket" not in [b.name for b in list_buckets(embedded_s3.config())]


def test_bucket_names_in_paths_are_checked(embedded_s3: EmbeddedS3) -> None:
    response = httpx.get(embedded_s3.endpoint_url + "/%2E%2E/x")
    assert response.status_code == 400
    assert "InvalidBucketName" in response.text


def test_credentials_are_the_ones_given(tmp_path: Path) -> None:
    with start_embedded_s3(
        directory=tmp_path / "own", access_key="someone", secret_key="their-secret"
    ) as server:
        assert server.running()
        assert server.config(alias="MINE").alias == "MINE"
        create_bucket(server.config(), bucket="mine")
        stock = server.config().__class__("X", server.endpoint_url, "us-east-1", "S3RVER", "S3RVER")
        with pytest.raises(AccessDenied):
            list_buckets(stock)
    assert not server.running()


def test_missing_s3rver_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedS3Error, match="s3rver is not installed"):
        start_embedded_s3(directory=tmp_path / "d", node_modules=tmp_path)


def test_a_taken_port_is_a_clear_error(embedded_s3: EmbeddedS3, tmp_path: Path) -> None:
    with pytest.raises(EmbeddedS3Error, match=r"did not start \(exit code 1\)(.|\n)*EADDRINUSE"):
        start_embedded_s3(
            directory=tmp_path / "d", port=embedded_s3.port, log_path=tmp_path / "log", timeout=10
        )
