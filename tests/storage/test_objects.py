"""Bucket and object operations against two S3 servers: the embedded s3rver and moto."""

from datetime import UTC, datetime
from typing import Any

import pytest

from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.embedded import EmbeddedS3
from storage.errors import (
    AccessDenied,
    BucketAlreadyExists,
    BucketNotEmpty,
    BucketNotFound,
    ObjectNotFound,
    StorageError,
    StorageUnavailable,
)
from storage.names import BucketNameError
from storage.objects import (
    BucketStats,
    add_bucket_cors,
    bucket_exists,
    bucket_stats,
    copy_object,
    create_bucket,
    delete_bucket,
    delete_object,
    delete_objects,
    head_bucket,
    head_object,
    iter_objects,
    list_buckets,
    list_objects,
    object_exists,
    put_object,
    read_object,
    remove_bucket_cors,
    set_bucket_cors,
)
from tests.fixtures.s3 import S3_SERVERS, SIGNATURES_CHECKED, each_s3_server

HARD_KEYS = [
    "a b.txt",
    "ünïcödé/ファイル.txt",
    "<script>alert(1)</script>",
    "../escape.txt",
    "x/../y.txt",
    "a//double",
    "/leading",
    "p+q%41&amp;.txt",
    ".hidden",
    "tab\tand\x01control",
    "𝄞 astral",
    "folder/",
    "deep/" + "/".join(["d" * 240] * 4),  # 1,000+ bytes with long segments
    "l" * 1024,  # one 1,024-byte segment: S3's maximum key length
]


@pytest.fixture(params=S3_SERVERS)
def s3_server(request: pytest.FixtureRequest) -> DatastoreConfig:
    return each_s3_server(request)


def test_create_list_and_delete_bucket(s3_server: DatastoreConfig) -> None:
    create_bucket(s3_server, bucket="lifecycle-test")
    assert "lifecycle-test" in [b.name for b in list_buckets(s3_server)]
    assert bucket_exists(s3_server, bucket="lifecycle-test")
    head_bucket(s3_server, bucket="lifecycle-test")
    with pytest.raises(BucketAlreadyExists):
        create_bucket(s3_server, bucket="lifecycle-test")
    delete_bucket(s3_server, bucket="lifecycle-test")
    assert not bucket_exists(s3_server, bucket="lifecycle-test")
    with pytest.raises(BucketNotFound):
        head_bucket(s3_server, bucket="lifecycle-test")
    with pytest.raises(BucketNotFound):
        delete_bucket(s3_server, bucket="lifecycle-test")


def test_create_bucket_checks_the_name_first(s3_server: DatastoreConfig) -> None:
    with pytest.raises(BucketNameError, match="uppercase"):
        create_bucket(s3_server, bucket="Bad-Name")


def test_delete_refuses_a_non_empty_bucket_unless_forced(
    s3_server: DatastoreConfig, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _put_many(s3_server, bucket, [f"k/{index:02}" for index in range(25)])
    with pytest.raises(BucketNotEmpty):
        delete_bucket(s3_server, bucket=bucket)
    assert bucket_exists(s3_server, bucket=bucket)
    monkeypatch.setattr("storage.objects.DELETE_BATCH", 10)
    seen: list[int] = []
    assert delete_bucket(s3_server, bucket=bucket, force=True, on_progress=seen.append) == 25
    assert seen == [10, 20, 25]
    assert not bucket_exists(s3_server, bucket=bucket)


@pytest.mark.slow
def test_force_delete_sends_batches_of_1000(s3_server: DatastoreConfig, bucket: str) -> None:
    _put_many(s3_server, bucket, [f"many/{index:05}" for index in range(1050)])
    assert bucket_stats(s3_server, bucket=bucket) == BucketStats(object_count=1050, total_size=1050)
    seen: list[int] = []
    assert delete_bucket(s3_server, bucket=bucket, force=True, on_progress=seen.append) == 1050
    assert seen == [1000, 1050]


def test_hard_keys_round_trip(s3_server: DatastoreConfig, bucket: str) -> None:
    for key in HARD_KEYS:
        put_object(s3_server, bucket=bucket, key=key, data=key.encode())
    for key in HARD_KEYS:
        assert read_object(s3_server, bucket=bucket, key=key, max_bytes=4096) == key.encode()
        assert head_object(s3_server, bucket=bucket, key=key).size == len(key.encode())
    listed = [info.key for info in iter_objects(s3_server, bucket=bucket)]
    assert listed == sorted(HARD_KEYS, key=lambda key: key.encode())
    result = delete_objects(s3_server, bucket=bucket, keys=HARD_KEYS)
    assert sorted(result.deleted) == sorted(HARD_KEYS)
    assert result.errors == []
    assert list(iter_objects(s3_server, bucket=bucket)) == []


def test_traversal_keys_stay_inside_the_bucket(
    s3_server: DatastoreConfig, bucket: str, embedded_s3: EmbeddedS3
) -> None:
    put_object(s3_server, bucket=bucket, key="../../../outside.txt", data=b"no")
    put_object(s3_server, bucket=bucket, key="y.txt", data=b"y")
    put_object(s3_server, bucket=bucket, key="x/../y.txt", data=b"x/../y")
    assert read_object(s3_server, bucket=bucket, key="y.txt", max_bytes=10) == b"y"
    assert read_object(s3_server, bucket=bucket, key="x/../y.txt", max_bytes=10) == b"x/../y"
    listed = [info.key for info in iter_objects(s3_server, bucket=bucket)]
    assert listed == ["../../../outside.txt", "x/../y.txt", "y.txt"]
    if s3_server.endpoint_url == embedded_s3.endpoint_url:  # our server: its files too
        escaped = list(embedded_s3.directory.parent.rglob("*outside*"))
        assert len(escaped) >= 1 and all(bucket in path.parts for path in escaped)


def test_folder_listing_with_pagination(s3_server: DatastoreConfig, bucket: str) -> None:
    keys = [
        "data/a.txt",
        "data/b.txt",
        "data/sub/1.txt",
        "data/sub/2.txt",
        "data/sub2/x",
        "data/z.txt",
        "data-other/skip",
        "top.txt",
    ]
    _put_many(s3_server, bucket, keys)
    root = list_objects(s3_server, bucket=bucket)
    assert root.prefixes == ["data-other/", "data/"]
    assert [o.key for o in root.objects] == ["top.txt"]
    assert root.next_token is None
    entries: list[str] = []
    token = None
    pages = 0
    while True:
        page = list_objects(s3_server, bucket=bucket, prefix="data/", page_size=2, token=token)
        pages += 1
        entries += page.prefixes + [o.key for o in page.objects]
        token = page.next_token
        if token is None:
            break
    assert sorted(entries) == ["data/a.txt", "data/b.txt", "data/sub/", "data/sub2/", "data/z.txt"]
    assert pages == 3
    flat = list_objects(s3_server, bucket=bucket, prefix="data/", delimiter="")
    assert [o.key for o in flat.objects] == keys[:6]


def test_object_info_fields(s3_server: DatastoreConfig, bucket: str) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    etag = put_object(
        s3_server, bucket=bucket, key="f.json", data=b"{}", content_type="application/json"
    )
    info = head_object(s3_server, bucket=bucket, key="f.json")
    assert info.etag == etag == "99914b932bd37a50b983c5e7c90ae93b"  # md5 of "{}"
    assert info.size == 2
    assert info.content_type == "application/json"
    assert info.last_modified >= before
    [listed] = list_objects(s3_server, bucket=bucket).objects
    assert (listed.key, listed.size, listed.etag) == ("f.json", 2, etag)


def test_missing_objects_and_deletes(s3_server: DatastoreConfig, bucket: str) -> None:
    with pytest.raises(ObjectNotFound):
        head_object(s3_server, bucket=bucket, key="missing")
    with pytest.raises(ObjectNotFound):
        read_object(s3_server, bucket=bucket, key="missing", max_bytes=1)
    assert not object_exists(s3_server, bucket=bucket, key="missing")
    delete_object(s3_server, bucket=bucket, key="missing")  # S3 semantics: no error
    put_object(s3_server, bucket=bucket, key="one", data=b"1")
    delete_object(s3_server, bucket=bucket, key="one")
    assert not object_exists(s3_server, bucket=bucket, key="one")


def test_read_object_refuses_large_objects(s3_server: DatastoreConfig, bucket: str) -> None:
    put_object(s3_server, bucket=bucket, key="big", data=b"x" * 100)
    with pytest.raises(StorageError, match="larger than 10 bytes"):
        read_object(s3_server, bucket=bucket, key="big", max_bytes=10)


def test_copy_object(s3_server: DatastoreConfig, bucket: str) -> None:
    put_object(s3_server, bucket=bucket, key="src/ü 1", data=b"payload")
    copy_object(s3_server, bucket=bucket, source_key="src/ü 1", dest_key="dst/ü 2")
    assert read_object(s3_server, bucket=bucket, key="dst/ü 2", max_bytes=100) == b"payload"


def test_stats_by_prefix(s3_server: DatastoreConfig, bucket: str) -> None:
    put_object(s3_server, bucket=bucket, key="a/1", data=b"12345")
    put_object(s3_server, bucket=bucket, key="a/2", data=b"123")
    put_object(s3_server, bucket=bucket, key="b/1", data=b"1")
    assert bucket_stats(s3_server, bucket=bucket) == BucketStats(3, 9)
    assert bucket_stats(s3_server, bucket=bucket, prefix="a/") == BucketStats(2, 8)


@SIGNATURES_CHECKED
def test_wrong_credentials_are_access_denied(s3_server: DatastoreConfig, bucket: str) -> None:
    wrong = DatastoreConfig("LOCAL", s3_server.endpoint_url, "us-east-1", s3_server.access_key, "x")
    with pytest.raises(AccessDenied):
        bucket_exists(wrong, bucket=bucket)
    unknown = DatastoreConfig("LOCAL", s3_server.endpoint_url, "us-east-1", "nobody", "x")
    with pytest.raises(AccessDenied):
        list_objects(unknown, bucket=bucket)


def test_unreachable_endpoint_is_unavailable() -> None:
    down = DatastoreConfig("DOWN", "http://127.0.0.1:9", "us-east-1", "a", "b")
    with pytest.raises(StorageUnavailable):
        head_bucket(down, bucket="abc")


def _put_many(config: DatastoreConfig, bucket: str, keys: list[str]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: put_object(config, bucket=bucket, key=key, data=b"x"), keys))


def test_add_bucket_cors_keeps_the_buckets_own_rules(
    s3_server: DatastoreConfig, bucket: str
) -> None:
    theirs = {
        "AllowedOrigins": ["https://their.app"],
        "AllowedMethods": ["GET"],
        "AllowedHeaders": ["*"],
        "MaxAgeSeconds": 60,
    }
    client = make_s3_client(s3_server)
    client.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [theirs]})
    assert add_bucket_cors(s3_server, bucket=bucket, origins=["http://panel"]) is True
    rules = client.get_bucket_cors(Bucket=bucket)["CORSRules"]
    assert [rule["AllowedOrigins"] for rule in rules] == [["https://their.app"], ["http://panel"]]
    assert rules[1]["ExposeHeaders"] == ["ETag"]
    assert set(rules[1]["AllowedMethods"]) == {"GET", "PUT", "HEAD"}
    # Already allowed (also through a wildcard): nothing to add.
    assert add_bucket_cors(s3_server, bucket=bucket, origins=["http://panel"]) is False
    set_bucket_cors(s3_server, bucket=bucket, origins=["https://*.example.net"])
    assert add_bucket_cors(s3_server, bucket=bucket, origins=["https://a.example.net"]) is False
    assert len(client.get_bucket_cors(Bucket=bucket)["CORSRules"]) == 1


def test_remove_bucket_cors_takes_back_only_the_rule_added(
    s3_server: DatastoreConfig, bucket: str
) -> None:
    theirs = {"AllowedOrigins": ["https://their.app"], "AllowedMethods": ["GET"]}
    client = make_s3_client(s3_server)
    client.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [theirs]})
    assert add_bucket_cors(s3_server, bucket=bucket, origins=["http://panel"]) is True
    assert remove_bucket_cors(s3_server, bucket=bucket, origins=["http://other"]) is False
    assert remove_bucket_cors(s3_server, bucket=bucket, origins=["http://panel"]) is True
    rules = client.get_bucket_cors(Bucket=bucket)["CORSRules"]
    assert [(r["AllowedOrigins"], r["AllowedMethods"]) for r in rules] == [
        (["https://their.app"], ["GET"])
    ]
    assert remove_bucket_cors(s3_server, bucket=bucket, origins=["http://panel"]) is False


def test_remove_bucket_cors_of_the_last_rule_deletes_the_configuration(
    s3_server: DatastoreConfig, bucket: str
) -> None:
    set_bucket_cors(s3_server, bucket=bucket, origins=["http://panel"])  # ours, alone
    assert remove_bucket_cors(s3_server, bucket=bucket, origins=["http://panel"]) is True
    client = make_s3_client(s3_server)
    assert ["http://panel"] not in [
        rule["AllowedOrigins"] for rule in _cors_or_none(client, bucket)
    ]


def _cors_or_none(client: Any, bucket: str) -> list[dict[str, Any]]:
    """The bucket's CORS rules, [] when it has no configuration (s3rver then answers with the
    embedded store's default rule, which is not ours to remove)."""
    try:
        return list(client.get_bucket_cors(Bucket=bucket)["CORSRules"])
    except client.exceptions.ClientError:
        return []
