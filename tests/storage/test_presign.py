"""Presigned URLs used the way a browser uses them (httpx, no AWS credentials), against two S3
servers: the embedded s3rver and moto."""

import dataclasses
import hashlib
import time

import httpx
import pytest

from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.errors import InvalidPart, UploadNotFound
from storage.objects import head_object, list_objects, put_object, read_object
from storage.presign import (
    MAX_PART_SIZE,
    MIN_PART_SIZE,
    CompletedPart,
    PartPlan,
    abort_multipart_upload,
    complete_multipart_upload,
    content_disposition,
    create_multipart_upload,
    plan_parts,
    presign_get,
    presign_put,
    presign_upload_parts,
)
from tests.fixtures.s3 import S3_SERVERS, URL_SIGNATURES_CHECKED, each_s3_server

MiB = 1024 * 1024


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


def test_presigned_get_downloads_with_the_file_name(
    s3_server: DatastoreConfig, bucket: str
) -> None:
    put_object(s3_server, bucket=bucket, key="reports/été 2024 <final>.csv", data=b"a,b\n1,2\n")
    url = presign_get(s3_server, bucket=bucket, key="reports/été 2024 <final>.csv", expires_in=60)
    response = httpx.get(url)
    assert response.status_code == 200
    assert response.content == b"a,b\n1,2\n"
    disposition = response.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="_t_ 2024 <final>.csv"')
    assert "filename*=UTF-8''%C3%A9t%C3%A9%202024%20%3Cfinal%3E.csv" in disposition


def test_presigned_get_with_a_chosen_name_inline(s3_server: DatastoreConfig, bucket: str) -> None:
    put_object(s3_server, bucket=bucket, key="k", data=b"x")
    url = presign_get(s3_server, bucket=bucket, key="k", filename='a "quoted".txt', inline=True)
    disposition = httpx.get(url).headers["content-disposition"]
    assert disposition.startswith('inline; filename="a _quoted_.txt"')


@URL_SIGNATURES_CHECKED
def test_tampered_or_expired_urls_are_refused(s3_server: DatastoreConfig, bucket: str) -> None:
    put_object(s3_server, bucket=bucket, key="secret.txt", data=b"s")
    url = presign_get(s3_server, bucket=bucket, key="secret.txt", expires_in=1)
    other = url.replace("secret.txt", "other.txt")
    assert httpx.get(other).status_code == 403
    time.sleep(2.1)
    assert httpx.get(url).status_code == 403
    assert httpx.get(f"{s3_server.endpoint_url}/{bucket}/secret.txt").status_code == 403


def test_presigned_put_uploads_a_small_file(s3_server: DatastoreConfig, bucket: str) -> None:
    url = presign_put(s3_server, bucket=bucket, key="up/ü ../x.txt", content_type="text/plain")
    response = httpx.put(url, content=b"hello", headers={"Content-Type": "text/plain"})
    assert response.status_code == 200
    assert (
        response.headers["etag"].strip('"')
        == hashlib.md5(b"hello", usedforsecurity=False).hexdigest()
    )
    info = head_object(s3_server, bucket=bucket, key="up/ü ../x.txt")
    assert (info.size, info.content_type) == (5, "text/plain")


@URL_SIGNATURES_CHECKED
def test_presigned_put_is_bound_to_its_content_type(
    s3_server: DatastoreConfig, bucket: str
) -> None:
    url = presign_put(s3_server, bucket=bucket, key="x.txt", content_type="text/plain")
    wrong_type = httpx.put(url, content=b"evil", headers={"Content-Type": "text/html"})
    assert wrong_type.status_code == 403
    assert list_objects(s3_server, bucket=bucket).objects == []


def test_presigned_multipart_upload(s3_server: DatastoreConfig, bucket: str) -> None:
    data = bytes(range(256)) * (MiB // 256) * 11 + b"tail"  # 11 MiB + 4 bytes
    plan = plan_parts(size=len(data), part_size=MIN_PART_SIZE)
    assert (plan.part_count, plan.part_size) == (3, MIN_PART_SIZE)
    key = "big/model weights.bin"
    upload_id = create_multipart_upload(s3_server, bucket=bucket, key=key)
    urls = presign_upload_parts(
        s3_server, bucket=bucket, key=key, upload_id=upload_id, part_numbers=range(1, 4)
    )
    parts = []
    for part in reversed(urls):  # browsers finish parts in any order
        start = (part.part_number - 1) * plan.part_size
        response = httpx.put(part.url, content=data[start : start + plan.part_size])
        assert response.status_code == 200
        parts.append(CompletedPart(part.part_number, response.headers["etag"]))
    etag = complete_multipart_upload(
        s3_server, bucket=bucket, key=key, upload_id=upload_id, parts=parts
    )
    assert etag
    assert read_object(s3_server, bucket=bucket, key=key, max_bytes=len(data)) == data


def test_aborted_multipart_upload_leaves_nothing(s3_server: DatastoreConfig, bucket: str) -> None:
    upload_id = create_multipart_upload(s3_server, bucket=bucket, key="gone.bin")
    [part] = presign_upload_parts(
        s3_server, bucket=bucket, key="gone.bin", upload_id=upload_id, part_numbers=[1]
    )
    assert httpx.put(part.url, content=b"x" * 100).status_code == 200
    abort_multipart_upload(s3_server, bucket=bucket, key="gone.bin", upload_id=upload_id)
    assert list_objects(s3_server, bucket=bucket).objects == []
    with pytest.raises(UploadNotFound, match="NoSuchUpload"):
        abort_multipart_upload(s3_server, bucket=bucket, key="gone.bin", upload_id=upload_id)


@pytest.mark.parametrize("s3_server", ["s3rver"], indirect=True)  # the embedded server's rule
def test_cors_preflight_allows_browser_uploads(s3_server: DatastoreConfig, bucket: str) -> None:
    # `bucket` was created after the server started: the default rule still applies.
    preflight = httpx.options(
        f"{s3_server.endpoint_url}/{bucket}/some/key.bin",
        headers={
            "Origin": "http://127.0.0.1:8000",
            "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "PUT" in preflight.headers["access-control-allow-methods"]
    url = presign_put(s3_server, bucket=bucket, key="cors.bin")
    upload = httpx.put(url, content=b"x", headers={"Origin": "http://127.0.0.1:8000"})
    assert upload.headers["access-control-expose-headers"] == "ETag"


def test_plan_parts_limits() -> None:
    assert plan_parts(size=0) == PartPlan(size=0, part_size=16 * MiB, part_count=1)
    assert plan_parts(size=100 * MiB).part_count == 7
    huge = plan_parts(size=5 * 1024**4)  # 5 TiB needs parts over 500 MiB
    assert huge.part_count <= 10_000
    assert huge.part_size * huge.part_count >= 5 * 1024**4
    with pytest.raises(ValueError, match="0 to"):
        plan_parts(size=-1)
    assert plan_parts(size=10 * 1024**3, part_size=MAX_PART_SIZE).part_count == 2
    with pytest.raises(ValueError, match="at most 5368709120 bytes"):
        plan_parts(size=10 * 1024**3, part_size=MAX_PART_SIZE + 1)


def test_content_disposition_escapes_everything() -> None:
    assert content_disposition("a.txt") == (
        "attachment; filename=\"a.txt\"; filename*=UTF-8''a.txt"
    )
    value = content_disposition('x";\r\nSet-Cookie: a=b.txt')
    assert "\r" not in value and "\n" not in value
    assert value.startswith('attachment; filename="x____Set-Cookie: a=b.txt"')


def test_presign_rejects_bad_arguments(s3_server: DatastoreConfig) -> None:
    with pytest.raises(ValueError, match="7 days"):
        presign_get(s3_server, bucket="abc", key="k", expires_in=8 * 24 * 3600)
    with pytest.raises(ValueError, match="part numbers"):
        presign_upload_parts(s3_server, bucket="abc", key="k", upload_id="u", part_numbers=[0])


def _public_alias(config: DatastoreConfig) -> DatastoreConfig:
    """The same server reached by another name, as a browser reaches a Compose service."""
    assert "//127.0.0.1:" in config.endpoint_url
    public = config.endpoint_url.replace("//127.0.0.1:", "//localhost:")
    return dataclasses.replace(config, public_endpoint_url=public)


@URL_SIGNATURES_CHECKED
def test_presigned_urls_are_signed_for_the_public_endpoint(
    s3_server: DatastoreConfig, bucket: str
) -> None:
    config = _public_alias(s3_server)
    public = config.public_endpoint_url
    put_url = presign_put(config, bucket=bucket, key="a b.txt")
    assert put_url.startswith(f"{public}/{bucket}/a%20b.txt?")
    assert httpx.put(put_url, content=b"via the public name").status_code == 200
    get_url = presign_get(config, bucket=bucket, key="a b.txt")
    assert get_url.startswith(public + "/")
    assert httpx.get(get_url).content == b"via the public name"
    # Signed for the public host: sent to the internal one, the signature does not match.
    assert httpx.get(get_url.replace(public, s3_server.endpoint_url)).status_code == 403
    # Server-side calls still go to the endpoint the panel reaches.
    assert make_s3_client(config).meta.endpoint_url == s3_server.endpoint_url
    assert make_s3_client(s3_server, public=True) is make_s3_client(s3_server)


@URL_SIGNATURES_CHECKED
def test_multipart_parts_are_signed_for_the_public_endpoint(
    s3_server: DatastoreConfig, bucket: str
) -> None:
    config = _public_alias(s3_server)
    data = b"p" * MIN_PART_SIZE + b"tail"
    upload_id = create_multipart_upload(config, bucket=bucket, key="big.bin")
    urls = presign_upload_parts(
        config, bucket=bucket, key="big.bin", upload_id=upload_id, part_numbers=[1, 2]
    )
    parts = []
    for part, chunk in zip(urls, (data[:MIN_PART_SIZE], data[MIN_PART_SIZE:]), strict=True):
        assert part.url.startswith(config.public_endpoint_url + "/")
        response = httpx.put(part.url, content=chunk)
        assert response.status_code == 200
        parts.append(CompletedPart(part.part_number, response.headers["etag"]))
    complete_multipart_upload(
        config, bucket=bucket, key="big.bin", upload_id=upload_id, parts=parts
    )
    assert read_object(s3_server, bucket=bucket, key="big.bin", max_bytes=len(data)) == data


# moto answers CompleteMultipartUpload of an upload it does not know with a 500 (a KeyError in
# its server): real S3 and s3rver say NoSuchUpload, which is what the product maps.
@pytest.mark.parametrize("s3_server", ["s3rver"], indirect=True)
def test_completing_an_unknown_upload_says_so(s3_server: DatastoreConfig, bucket: str) -> None:
    for made_up in ("made-up", "0" * 32, "../../etc"):
        with pytest.raises(UploadNotFound, match="NoSuchUpload"):
            complete_multipart_upload(
                s3_server,
                bucket=bucket,
                key="k",
                upload_id=made_up,
                parts=[CompletedPart(1, "abc")],
            )


def test_completing_with_a_wrong_part_says_so(s3_server: DatastoreConfig, bucket: str) -> None:
    upload_id = create_multipart_upload(s3_server, bucket=bucket, key="k")
    with pytest.raises(InvalidPart):  # part 1 never uploaded
        complete_multipart_upload(
            s3_server, bucket=bucket, key="k", upload_id=upload_id, parts=[CompletedPart(1, "x")]
        )
    [part] = presign_upload_parts(
        s3_server, bucket=bucket, key="k", upload_id=upload_id, part_numbers=[1]
    )
    etag = httpx.put(part.url, content=b"one").headers["etag"]
    with pytest.raises(InvalidPart):  # the wrong ETag
        complete_multipart_upload(
            s3_server, bucket=bucket, key="k", upload_id=upload_id, parts=[CompletedPart(1, "0")]
        )
    complete_multipart_upload(
        s3_server, bucket=bucket, key="k", upload_id=upload_id, parts=[CompletedPart(1, etag)]
    )
    assert read_object(s3_server, bucket=bucket, key="k", max_bytes=9) == b"one"
