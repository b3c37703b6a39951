"""REST API: buckets, objects and presigned transfers, with httpx PUT/GET against a real S3
server for the bytes (they never pass through Django); every test runs on two servers, the
embedded s3rver and moto (tests/fixtures/s3.py)."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from rest_framework.test import APIClient

from controlpanel.buckets.models import Bucket
from storage import objects
from storage.datastore import DatastoreConfig
from tests.fixtures.s3 import S3_SERVERS, each_s3_server

pytestmark = pytest.mark.django_db


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


@pytest.fixture
def made(datastore: DatastoreConfig, owner_api: APIClient, name: str) -> str:
    """A bucket of project alpha, created through the API: its API path."""
    response = owner_api.post("/api/v1/buckets/", {"name": name}, format="json")
    assert response.status_code == 201, response.content
    return f"/api/v1/buckets/LOCAL/{name}/"


def test_create_list_and_read_a_bucket(
    made: str, name: str, owner_api: APIClient, outsider_api: APIClient
) -> None:
    listed = owner_api.get("/api/v1/buckets/?project=alpha").json()
    assert listed["count"] == 1
    row = listed["results"][0]
    assert {
        k: row[k] for k in ("name", "datastore", "project", "origin", "created_by", "volume")
    } == {
        "name": name,
        "datastore": "LOCAL",
        "project": "alpha",
        "origin": "created",
        "created_by": "owner",
        "volume": f"{name}@LOCAL",
    }
    assert owner_api.get(made).json()["name"] == name
    assert outsider_api.get("/api/v1/buckets/").json()["count"] == 0  # their own project: none
    assert outsider_api.get("/api/v1/buckets/?project=alpha").status_code == 404


def test_create_answers_the_naming_rule(datastore: DatastoreConfig, owner_api: APIClient) -> None:
    response = owner_api.post("/api/v1/buckets/", {"name": "Bad_Name"}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "name": ["uppercase letter 'B' at position 0: bucket names are lowercase"]
    }


def test_attach_and_attach_missing(
    datastore: DatastoreConfig, owner_api: APIClient, name: str, grant: Any
) -> None:
    grant(name)
    missing = owner_api.post("/api/v1/buckets/attach/", {"name": name}, format="json")
    assert missing.status_code == 400
    assert missing.json() == {"name": [f"There is no bucket named {name} on LOCAL."]}
    objects.create_bucket(datastore, bucket=name)
    attached = owner_api.post(
        "/api/v1/buckets/attach/", {"name": name, "datastore": "LOCAL"}, format="json"
    )
    assert attached.status_code == 201
    assert attached.json()["origin"] == "attached"


def test_delete_non_empty_is_409_then_empty_true_empties(
    made: str,
    name: str,
    datastore: DatastoreConfig,
    owner_api: APIClient,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    objects.put_object(datastore, bucket=name, key="x", data=b"1")
    refused = owner_api.delete(made)
    assert refused.status_code == 409
    assert "not empty" in refused.json()["detail"]
    with django_capture_on_commit_callbacks(execute=True):
        started = owner_api.delete(made + "?empty=true")
    assert started.status_code == 202
    assert started.json()["state"] == "emptying"
    assert owner_api.get(made).status_code == 404
    assert not objects.bucket_exists(datastore, bucket=name)


def test_delete_an_empty_bucket_is_204(made: str, owner_api: APIClient) -> None:
    assert owner_api.delete(made).status_code == 204
    assert not Bucket.objects.exists()


def test_list_objects_by_prefix_with_pagination(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient
) -> None:
    for key in ("a/1", "a/2", "a/3", "b/x", "top.txt"):
        objects.put_object(datastore, bucket=name, key=key, data=b"abc")
    root = owner_api.get(made + "objects/").json()
    assert root["prefixes"] == ["a/", "b/"]
    assert [o["key"] for o in root["objects"]] == ["top.txt"]
    assert root["objects"][0]["size"] == 3 and root["objects"][0]["etag"]
    keys: list[str] = []
    token = None
    while True:
        page = owner_api.get(
            made + "objects/", {"prefix": "a/", "limit": 2, **({"token": token} if token else {})}
        ).json()
        keys += [o["key"] for o in page["objects"]]
        token = page["next_token"]
        if token is None:
            break
    assert keys == ["a/1", "a/2", "a/3"]
    flat = owner_api.get(made + "objects/", {"delimiter": ""}).json()
    assert len(flat["objects"]) == 5 and flat["prefixes"] == []


def test_delete_many_objects(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient
) -> None:
    for key in ("keep", "gone/1", "gone/2", "x"):
        objects.put_object(datastore, bucket=name, key=key, data=b"")
    response = owner_api.post(
        made + "objects/delete/", {"keys": ["x"], "prefixes": ["gone/"]}, format="json"
    )
    assert response.status_code == 200
    assert sorted(response.json()["deleted"]) == ["gone/1", "gone/2", "x"]
    assert [o.key for o in objects.iter_objects(datastore, bucket=name)] == ["keep"]


def test_single_put_upload_and_download(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient
) -> None:
    key = "dir/ünï cödé <b>.txt"
    put = owner_api.post(made + "upload-url/", {"key": key}, format="json").json()
    assert httpx.put(put["url"], content=b"hello").status_code == 200
    assert owner_api.post(made + "upload-done/", {"key": key}, format="json").status_code == 204
    url = owner_api.get(made + "download-url/", {"key": key}).json()["url"]
    got = httpx.get(url)
    assert got.content == b"hello"
    assert (
        "filename*=UTF-8''%C3%BCn%C3%AF%20c%C3%B6d%C3%A9%20%3Cb%3E.txt"
        in got.headers["content-disposition"]
    )
    missing = owner_api.get(made + "download-url/", {"key": "nope"})
    assert missing.status_code == 404


def test_multipart_upload_in_parts(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient
) -> None:
    data = os.urandom(11 * 1024 * 1024)
    plan = owner_api.post(
        made + "uploads/",
        {"key": "big.bin", "size": len(data), "part_size": 5 * 1024 * 1024},
        format="json",
    ).json()
    assert (plan["part_size"], plan["part_count"]) == (5 * 1024 * 1024, 3)
    upload = {"key": "big.bin", "upload_id": plan["upload_id"]}
    urls = owner_api.post(
        made + "uploads/parts/", {**upload, "part_numbers": [1, 2, 3]}, format="json"
    ).json()["parts"]
    parts = []
    for part in urls:
        start = (part["part_number"] - 1) * plan["part_size"]
        answer = httpx.put(part["url"], content=data[start : start + plan["part_size"]])
        parts.append({"part_number": part["part_number"], "etag": answer.headers["ETag"]})
    done = owner_api.post(made + "uploads/complete/", {**upload, "parts": parts}, format="json")
    assert done.status_code == 200
    assert done.json()["key"] == "big.bin" and done.json()["etag"]
    assert objects.read_object(datastore, bucket=name, key="big.bin", max_bytes=len(data)) == data


def test_abort_a_multipart_upload(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient
) -> None:
    plan = owner_api.post(
        made + "uploads/", {"key": "cancelled.bin", "size": 10}, format="json"
    ).json()
    upload = {"key": "cancelled.bin", "upload_id": plan["upload_id"]}
    assert owner_api.post(made + "uploads/abort/", upload, format="json").status_code == 204
    again = owner_api.post(made + "uploads/abort/", upload, format="json")
    assert again.status_code == 404  # the server's NoSuchUpload, on both servers
    assert "No such upload" in again.json()["detail"]
    assert not objects.object_exists(datastore, bucket=name, key="cancelled.bin")


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"key": ""}, "key", "blank"),
        ({"key": "a\x01b"}, "key", "control character '\\x01' at position 1"),
        ({"key": "é" * 600}, "key", "1200 bytes long in UTF-8; S3 allows 1024"),
    ],
)
def test_bad_keys_are_refused(
    made: str, owner_api: APIClient, body: dict, field: str, text: str
) -> None:
    response = owner_api.post(made + "upload-url/", body, format="json")
    assert response.status_code == 400
    assert text in " ".join(response.json()[field])


def test_bad_upload_requests_are_400(made: str, owner_api: APIClient) -> None:
    too_big = owner_api.post(made + "uploads/", {"key": "k", "size": 6 * 1024**4}, format="json")
    assert too_big.status_code == 400 and "size" in too_big.json()
    plan = owner_api.post(made + "uploads/", {"key": "k", "size": 1}, format="json").json()
    bad_part = owner_api.post(
        made + "uploads/parts/",
        {"key": "k", "upload_id": plan["upload_id"], "part_numbers": [0]},
        format="json",
    )
    assert bad_part.status_code == 400
    assert "part numbers run from 1 to 10000" in bad_part.json()["part_numbers"][0]


def test_a_key_with_a_control_character_is_400_not_502(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient
) -> None:
    response = owner_api.get(made + "download-url/?key=a%00b")
    assert response.status_code == 400
    assert response.json() == {"key": ["The key has the control character '\\x00' at position 1."]}
    dotted = owner_api.get(made + "download-url/", {"key": "a/../b"})
    assert dotted.status_code == 400 and "'.' or '..'" in dotted.json()["key"][0]


CONTROL = "The content type has the control character"


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        ("text/plain\x01", f"{CONTROL} '\\x01' at position 10."),
        ("text/plain\x7f", f"{CONTROL} '\\x7f' at position 10."),
        ("a\nb", f"{CONTROL} '\\n' at position 1."),
        ("text/é", "The content type has the non-ASCII character 'é' at position 5."),
        ("plain", "'plain' is not a media type: give type/subtype, e.g. text/plain."),
        (
            "text/plain; x",
            "'text/plain; x' is not a media type: give type/subtype, e.g. text/plain.",
        ),
        ("a/" + "b" * 300, "Ensure this field has no more than 255 characters."),
    ],
)
def test_a_bad_content_type_is_400_naming_it_not_502(
    made: str,
    name: str,
    datastore: DatastoreConfig,
    owner_api: APIClient,
    content_type: str,
    message: str,
) -> None:
    """The store answered these with a 400 (or a signature mismatch) the panel passed on as 502."""
    start = {"key": "k", "size": 1, "content_type": content_type}
    for path, body in [
        ("uploads/", start),
        ("upload-url/", {"key": "k", "content_type": content_type}),
    ]:
        response = owner_api.post(made + path, body, format="json")
        assert response.status_code == 400, (path, response.content)
        assert response.json() == {"content_type": [message]}
    for good in ("text/plain; charset=utf-8", 'multipart/x; boundary="a b"', ""):
        started = owner_api.post(made + "uploads/", {**start, "content_type": good}, format="json")
        assert started.status_code == 201, started.content


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"delimiter": "\x01"}, "delimiter", '"\x01" is not a valid choice.'),
        ({"delimiter": "ab"}, "delimiter", '"ab" is not a valid choice.'),
        ({"token": "\x01"}, "token", "The token has the control character '\\x01' at position 0."),
        ({"token": "é"}, "token", "The token has the non-ASCII character 'é' at position 0."),
        (
            {"prefix": "a\x01"},
            "prefix",
            "The prefix has the control character '\\x01' at position 1.",
        ),
        (
            {"prefix": "é" * 513},
            "prefix",
            "The prefix is 1026 bytes long in UTF-8; keys have at most 1024.",
        ),
        ({"limit": "0"}, "limit", "Ensure this value is greater than or equal to 1."),
        ({"limit": "1001"}, "limit", "Ensure this value is less than or equal to 1000."),
        ({"limit": "ten"}, "limit", "A valid integer is required."),
    ],
)
def test_a_bad_listing_query_is_400_naming_it(
    made: str, owner_api: APIClient, query: dict[str, str], field: str, message: str
) -> None:
    response = owner_api.get(made + "objects/", query)
    assert response.status_code == 400, response.content
    assert response.json() == {field: [message]}


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("uploads/parts/", {"part_numbers": [1]}),
        ("uploads/abort/", {}),
        ("uploads/complete/", {"parts": [{"part_number": 1, "etag": "e"}]}),
    ],
)
def test_a_bad_upload_id_or_etag_is_400(
    made: str, owner_api: APIClient, path: str, extra: dict[str, Any]
) -> None:
    body = {"key": "k", "upload_id": "a\x01", **extra}
    response = owner_api.post(made + path, body, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "upload_id": ["The upload id has the control character '\\x01' at position 1."]
    }
    etag = {"key": "k", "upload_id": "u", "parts": [{"part_number": 1, "etag": "e\x02"}]}
    bad_etag = owner_api.post(made + "uploads/complete/", etag, format="json")
    assert bad_etag.json() == {
        "parts": {"0": {"etag": ["The ETag has the control character '\\x02' at position 1."]}}
    }


def test_a_wrong_part_is_400_and_aborting_a_made_up_upload_404(
    made: str, owner_api: APIClient
) -> None:
    part = [{"part_number": 1, "etag": "x"}]
    plan = owner_api.post(made + "uploads/", {"key": "k", "size": 3}, format="json").json()
    wrong = owner_api.post(
        made + "uploads/complete/",
        {"key": "k", "upload_id": plan["upload_id"], "parts": part},
        format="json",
    )
    assert wrong.status_code == 400 and "InvalidPart" in wrong.json()["parts"][0]
    abort = {"key": "k", "upload_id": "no-such-upload"}
    made_up = owner_api.post(made + "uploads/abort/", abort, format="json")
    assert made_up.status_code == 404 and made_up.json()["detail"].startswith("No such upload")


# moto answers CompleteMultipartUpload of an upload it does not know with a 500 (a KeyError in
# its server): real S3 and s3rver say NoSuchUpload, which the API answers with a 404.
@pytest.mark.parametrize("s3_server", ["s3rver"], indirect=True)
def test_completing_a_made_up_or_aborted_upload_is_404(made: str, owner_api: APIClient) -> None:
    plan = owner_api.post(made + "uploads/", {"key": "k", "size": 3}, format="json").json()
    assert (
        owner_api.post(
            made + "uploads/abort/", {"key": "k", "upload_id": plan["upload_id"]}, format="json"
        ).status_code
        == 204
    )
    for upload_id in ("no-such-upload", plan["upload_id"]):
        complete = owner_api.post(
            made + "uploads/complete/",
            {"key": "k", "upload_id": upload_id, "parts": [{"part_number": 1, "etag": "x"}]},
            format="json",
        )
        assert complete.status_code == 404, upload_id
        assert complete.json()["detail"].startswith("No such upload")


def test_part_sizes_over_5_gib_are_refused(made: str, owner_api: APIClient) -> None:
    gib = 1024**3
    for part_size in (5 * gib + 1, 6 * gib):
        response = owner_api.post(
            made + "uploads/", {"key": "k", "size": 20 * gib, "part_size": part_size}, format="json"
        )
        assert response.status_code == 400
        assert response.json() == {"part_size": ["A part holds at most 5 GiB (5368709120 bytes)."]}
    ok = owner_api.post(
        made + "uploads/", {"key": "k", "size": 20 * gib, "part_size": 5 * gib}, format="json"
    )
    assert (ok.status_code, ok.json()["part_count"]) == (201, 4)
    small = owner_api.post(
        made + "uploads/", {"key": "k", "size": 20, "part_size": 1}, format="json"
    ).json()
    assert small["part_size"] == 5 * 1024 * 1024  # raised to S3's minimum, as before


def test_folder_deletes_take_the_folder_only(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient
) -> None:
    for key in ("runs/1/a", "runs/1/b/c", "runs/10/x", "runs/1-old.txt", "runs/1"):
        objects.put_object(datastore, bucket=name, key=key, data=b"")
    response = owner_api.post(made + "objects/delete/", {"prefixes": ["runs/1"]}, format="json")
    assert sorted(response.json()["deleted"]) == ["runs/1/a", "runs/1/b/c"]
    left = sorted(o.key for o in objects.iter_objects(datastore, bucket=name))
    assert left == ["runs/1", "runs/1-old.txt", "runs/10/x"]


def test_presigned_urls_use_the_public_endpoint(
    made: str, name: str, datastore: DatastoreConfig, owner_api: APIClient, settings: Any
) -> None:
    """Under Compose the panel reaches http://minio:9000 and browsers http://localhost:9000:
    here 127.0.0.1 and localhost name the same test server."""
    public = datastore.endpoint_url.replace("//127.0.0.1:", "//localhost:")
    assert public != datastore.endpoint_url
    settings.S3_PUBLIC_ENDPOINT_URL = public
    put = owner_api.post(made + "upload-url/", {"key": "small.txt"}, format="json").json()
    assert put["url"].startswith(f"{public}/{name}/small.txt?")
    assert httpx.put(put["url"], content=b"hello").status_code == 200
    url = owner_api.get(made + "download-url/", {"key": "small.txt"}).json()["url"]
    assert url.startswith(public + "/") and httpx.get(url).content == b"hello"
    data = os.urandom(5 * 1024 * 1024 + 3)
    plan = owner_api.post(made + "uploads/", {"key": "big.bin", "size": len(data)}, format="json")
    upload = {"key": "big.bin", "upload_id": plan.json()["upload_id"]}
    [part] = owner_api.post(
        made + "uploads/parts/", {**upload, "part_numbers": [1]}, format="json"
    ).json()["parts"]
    assert part["url"].startswith(public + "/")
    etag = httpx.put(part["url"], content=data).headers["ETag"]
    parts = [{"part_number": 1, "etag": etag}]
    done = owner_api.post(made + "uploads/complete/", {**upload, "parts": parts}, format="json")
    assert done.status_code == 200
    assert objects.read_object(datastore, bucket=name, key="big.bin", max_bytes=len(data)) == data


def test_an_outsider_gets_no_presigned_url_for_another_projects_object(
    made: str, name: str, datastore: DatastoreConfig, outsider_api: APIClient
) -> None:
    objects.put_object(datastore, bucket=name, key="secret.txt", data=b"alpha only")
    for project in ("", "?project=beta", "?project=alpha"):
        download = outsider_api.get(made + "download-url/" + project, {"key": "secret.txt"})
        assert download.status_code == 404, project
    for path, body in [
        ("upload-url/", {"key": "x"}),
        ("uploads/", {"key": "x", "size": 1}),
        ("uploads/parts/", {"key": "x", "upload_id": "u", "part_numbers": [1]}),
    ]:
        assert outsider_api.post(made + path, body, format="json").status_code == 404
    assert objects.read_object(datastore, bucket=name, key="secret.txt", max_bytes=99)


def test_a_down_datastore_answers_503(made: str, owner_api: APIClient, settings: Any) -> None:
    settings.S3_ENDPOINT_URL = "http://127.0.0.1:9"  # discard port: nothing listens
    from storage.client import clear_client_cache

    clear_client_cache()
    response = owner_api.get(made + "objects/")
    assert response.status_code == 503
    assert response.json() == {"detail": "The datastore is unreachable."}


def test_openapi_schema_is_clean_and_describes_the_bucket_routes(tmp_path: Any) -> None:
    from django.core.management import call_command

    target = tmp_path / "schema.yml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    schema = target.read_text()
    for path in (
        "/api/v1/buckets/{datastore}/{name}/uploads/parts/",
        "/api/v1/datastores/",
        "/api/v1/buckets/{datastore}/{name}/download-url/",
    ):
        assert path in schema
    assert "PaginatedBucketList" in schema
