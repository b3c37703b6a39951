"""Bucket services against the real S3 server: create, attach, delete (with emptying),
object deletion and usage figures."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from controlpanel.buckets import services
from controlpanel.buckets.models import Bucket, BucketState, Origin
from controlpanel.buckets.selectors import bucket_usage, buckets_for_project
from controlpanel.projects.access import ProjectAccess, project_access
from storage import objects
from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.errors import AccessDenied

pytestmark = pytest.mark.django_db


def _messages(error: pytest.ExceptionInfo[ValidationError]) -> dict[str, list[str]]:
    return error.value.message_dict


def test_create_makes_the_bucket_on_s3_and_records_it(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str
) -> None:
    bucket = services.bucket_create(access=access, by=owner, name=name)
    assert objects.bucket_exists(datastore, bucket=name)
    assert (bucket.datastore, bucket.origin, bucket.created_by) == ("LOCAL", Origin.CREATED, owner)
    assert (bucket.object_count, bucket.total_size) == (0, 0)
    assert list(buckets_for_project(project=access.project)) == [bucket]


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ("ab", "too short (2 characters; at least 3)"),
        ("a" * 64, "too long (64 characters; at most 63)"),
        ("My-bucket", "uppercase letter 'M' at position 0"),
        ("my_bucket", "invalid character '_' at position 2"),
        ("-bucket", "must start with a lowercase letter or digit"),
        ("bucket-", "must end with a lowercase letter or digit"),
        ("my..bucket", "two adjacent dots at position 2"),
        ("192.168.1.1", "formatted like an IP address"),
        ("xn--bucket", "reserved 'xn--'"),
    ],
)
def test_create_names_the_broken_rule(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, bad: str, expected: str
) -> None:
    with pytest.raises(ValidationError) as error:
        services.bucket_create(access=access, by=owner, name=bad)
    assert expected in " ".join(_messages(error)["name"])
    assert not Bucket.objects.exists()


def test_create_refuses_a_taken_name(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str
) -> None:
    objects.create_bucket(datastore, bucket=name)  # someone else's, outside Ajuste
    with pytest.raises(ValidationError) as error:
        services.bucket_create(access=access, by=owner, name=name)
    assert "already exists on LOCAL" in _messages(error)["name"][0]
    assert not Bucket.objects.exists()  # the row was rolled back


def test_create_refuses_an_unknown_datastore(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str
) -> None:
    with pytest.raises(ValidationError) as error:
        services.bucket_create(access=access, by=owner, name=name, datastore="GRA")
    assert _messages(error)["datastore"] == ["No datastore is named 'GRA'."]


def test_attach_an_existing_bucket_after_an_access_check(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str, grant: Any
) -> None:
    objects.create_bucket(datastore, bucket=name)
    grant(name)
    bucket = services.bucket_attach(access=access, by=owner, name=name, datastore="LOCAL")
    assert bucket.origin == Origin.ATTACHED
    with pytest.raises(ValidationError) as error:
        services.bucket_attach(access=access, by=owner, name=name)
    assert "already attached" in _messages(error)["name"][0]


def test_attach_a_missing_bucket_is_refused(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str, grant: Any
) -> None:
    grant(name)
    with pytest.raises(ValidationError) as error:
        services.bucket_attach(access=access, by=owner, name=name)
    assert _messages(error)["name"] == [f"There is no bucket named {name} on LOCAL."]
    assert not Bucket.objects.exists()


def test_another_project_cannot_take_a_bucket_already_owned(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    outsider: Any,
    name: str,
    grant: Any,
) -> None:
    services.bucket_create(access=access, by=owner, name=name)
    theirs = project_access(user=outsider, slug="beta")
    grant(name, to=theirs.project)  # even an admin's grant moves no bucket held elsewhere
    for action in (services.bucket_create, services.bucket_attach):
        with pytest.raises(ValidationError):
            action(access=theirs, by=outsider, name=name)
    assert list(buckets_for_project(project=theirs.project)) == []


def test_delete_an_empty_bucket(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str
) -> None:
    bucket = services.bucket_create(access=access, by=owner, name=name)
    assert services.bucket_delete(access=access, bucket=bucket) is True
    assert not objects.bucket_exists(datastore, bucket=name)
    assert not Bucket.objects.exists()


def test_delete_refuses_a_non_empty_bucket_unless_emptying_is_confirmed(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    name: str,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    bucket = services.bucket_create(access=access, by=owner, name=name)
    for index in range(5):
        objects.put_object(datastore, bucket=name, key=f"k/{index}", data=b"x" * index)
    with pytest.raises(services.BucketNotEmptyError):
        services.bucket_delete(access=access, bucket=bucket)
    assert objects.bucket_exists(datastore, bucket=name)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert services.bucket_delete(access=access, bucket=bucket, empty=True) is False
    bucket.refresh_from_db()
    assert bucket.state == BucketState.EMPTYING  # what the page shows while the task runs
    for callback in callbacks:
        callback()
    assert not objects.bucket_exists(datastore, bucket=name)
    assert not Bucket.objects.filter(pk=bucket.pk).exists()


def test_emptying_records_its_progress_and_failures(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = services.bucket_create(access=access, by=owner, name=name)
    objects.put_object(datastore, bucket=name, key="a", data=b"1")
    Bucket.objects.filter(pk=bucket.pk).update(state=BucketState.EMPTYING)
    seen: list[tuple[int, int | None]] = []
    real_delete = objects.delete_objects

    def observed(*args: Any, **kwargs: Any) -> Any:
        real_delete(*args, **kwargs)
        row = Bucket.objects.get(pk=bucket.pk)
        seen.append((row.empty_done, row.empty_total))
        raise objects.StorageError("boom: the store went away", code="InternalError")

    monkeypatch.setattr(objects, "delete_objects", observed)
    services.bucket_empty_and_delete(bucket_id=bucket.pk)
    assert seen == [(1, 1)]
    bucket.refresh_from_db()
    assert (bucket.state, bucket.state_message) == (BucketState.FAILED, "boom: the store went away")


def test_deleting_an_attached_bucket_only_detaches_it(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str, grant: Any
) -> None:
    objects.create_bucket(datastore, bucket=name)
    grant(name)
    objects.put_object(datastore, bucket=name, key="keep.txt", data=b"theirs")
    bucket = services.bucket_attach(access=access, by=owner, name=name)
    assert services.bucket_delete(access=access, bucket=bucket) is True
    assert objects.object_exists(datastore, bucket=name, key="keep.txt")
    assert not Bucket.objects.exists()


def test_objects_delete_keys_and_folders_and_refresh_usage(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    name: str,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    bucket = services.bucket_create(access=access, by=owner, name=name)
    for key in ("a.txt", "b.txt", "dir/1", "dir/sub/2", "other/3"):
        objects.put_object(datastore, bucket=name, key=key, data=b"12345")
    with django_capture_on_commit_callbacks(execute=True):
        result = services.objects_delete(bucket=bucket, keys=["a.txt"], prefixes=["dir/"])
    assert sorted(result.deleted) == ["a.txt", "dir/1", "dir/sub/2"]
    bucket.refresh_from_db()
    assert (bucket.object_count, bucket.total_size) == (2, 10)
    assert bucket_usage(bucket=bucket).object_count == 2
    with pytest.raises(ValidationError):
        services.objects_delete(bucket=bucket, keys=[], prefixes=[""])


def test_a_folder_too_big_for_one_request_is_refused(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = services.bucket_create(access=access, by=owner, name=name)
    for index in range(4):
        objects.put_object(datastore, bucket=name, key=f"big/{index}", data=b"")
    monkeypatch.setattr(services, "MAX_PREFIX_DELETE", 3)
    with pytest.raises(ValidationError, match="More than 3 objects"):
        services.objects_delete(bucket=bucket, keys=[], prefixes=["big/"])
    assert objects.bucket_stats(datastore, bucket=name).object_count == 4


def test_a_folder_delete_takes_that_folder_only(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str
) -> None:
    bucket = services.bucket_create(access=access, by=owner, name=name)
    for key in ("runs/1/a", "runs/1/b/c", "runs/10/x", "runs/1-old.txt", "runs/1", "a//b", "a/c"):
        objects.put_object(datastore, bucket=name, key=key, data=b"")
    result = services.objects_delete(bucket=bucket, keys=[], prefixes=["runs/1"])
    assert sorted(result.deleted) == ["runs/1/a", "runs/1/b/c"]
    result = services.objects_delete(bucket=bucket, keys=[], prefixes=["a//"])
    assert result.deleted == ["a//b"]  # an empty-named folder is not its parent
    left = sorted(o.key for o in objects.iter_objects(datastore, bucket=name))
    assert left == ["a/c", "runs/1", "runs/1-old.txt", "runs/10/x"]


def test_attach_adds_the_cors_rule_and_keeps_the_buckets_own(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, name: str, grant: Any
) -> None:
    objects.create_bucket(datastore, bucket=name)
    grant(name)
    theirs = {"AllowedOrigins": ["https://their.app"], "AllowedMethods": ["GET"]}
    client = make_s3_client(datastore)
    client.put_bucket_cors(Bucket=name, CORSConfiguration={"CORSRules": [theirs]})
    bucket = services.bucket_attach(access=access, by=owner, name=name)
    rules = client.get_bucket_cors(Bucket=name)["CORSRules"]
    assert [rule["AllowedOrigins"] for rule in rules] == [
        ["https://their.app"],
        ["http://testserver"],
    ]
    assert bucket.cors_error == ""


def test_attach_succeeds_when_cors_is_refused_and_keeps_why(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
    grant: Any,
) -> None:
    objects.create_bucket(datastore, bucket=name)
    grant(name)

    def refuse(*args: Any, **kwargs: Any) -> bool:
        raise AccessDenied("AccessDenied: Access Denied (x)", code="AccessDenied")

    monkeypatch.setattr(objects, "add_bucket_cors", refuse)
    bucket = services.bucket_attach(access=access, by=owner, name=name)
    assert bucket.origin == Origin.ATTACHED
    stored = Bucket.objects.get(pk=bucket.pk).cors_error
    assert stored == bucket.cors_error
    assert stored.startswith("The datastore refused to set the CORS rule browser uploads need")
    assert "http://testserver" in stored
