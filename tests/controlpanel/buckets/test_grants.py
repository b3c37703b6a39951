"""Who may claim a bucket that already exists (issue 11): the datastore's shared keys reach
every bucket on it, so reaching one proves nothing about whose it is. Attaching needs an
admin's grant (or a site admin); "create" never takes a name that existed (moto, like AWS in
us-east-1, answers 200 to creating a bucket the keys own); CORS Ajuste did not set is never
replaced, and a detach takes back only the rule Ajuste added."""

from __future__ import annotations

from html import unescape
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlpanel.buckets import services
from controlpanel.buckets.models import Bucket, BucketGrant
from controlpanel.projects.access import ProjectAccess, project_access
from controlpanel.projects.models import Project
from storage import objects
from storage.client import make_s3_client
from storage.datastore import DatastoreConfig
from storage.errors import StorageError
from tests.fixtures.panel import logged_in

pytestmark = pytest.mark.django_db

THEIR_RULE = {"AllowedOrigins": ["https://their.app"], "AllowedMethods": ["GET"]}


def _theirs(datastore: DatastoreConfig, name: str) -> None:
    """A bucket no project registered, holding someone's object and their own CORS rule."""
    objects.create_bucket(datastore, bucket=name)
    objects.put_object(datastore, bucket=name, key="secret.csv", data=b"theirs")
    make_s3_client(datastore).put_bucket_cors(
        Bucket=name, CORSConfiguration={"CORSRules": [THEIR_RULE]}
    )


def _rules(datastore: DatastoreConfig, name: str) -> list[dict[str, Any]]:
    client = make_s3_client(datastore)
    try:
        return list(client.get_bucket_cors(Bucket=name)["CORSRules"])
    except client.exceptions.ClientError:
        return []


def _origins(datastore: DatastoreConfig, name: str) -> list[list[str]]:
    return [rule["AllowedOrigins"] for rule in _rules(datastore, name)]


def _grant(project: Project, name: str, by: Any = None) -> BucketGrant:
    return BucketGrant.objects.create(datastore="LOCAL", name=name, project=project, granted_by=by)


def test_a_member_cannot_claim_an_unregistered_bucket_the_keys_reach(
    datastore: DatastoreConfig, outsider: Any, other_project: Project, name: str
) -> None:
    _theirs(datastore, name)
    beta = project_access(user=outsider, slug="beta")
    with pytest.raises(services.BucketNotGranted) as refused:
        services.bucket_attach(access=beta, by=outsider, name=name)
    assert str(refused.value) == (
        f"Attaching an existing bucket needs an admin's grant: ask an admin to grant {name} "
        "on LOCAL to the project beta."
    )
    assert not Bucket.objects.exists()
    assert _origins(datastore, name) == [["https://their.app"]]  # CORS untouched
    assert objects.read_object(datastore, bucket=name, key="secret.csv", max_bytes=10) == b"theirs"


def test_the_refusal_comes_before_any_look_at_the_datastore(
    datastore: DatastoreConfig, outsider: Any, other_project: Project, name: str
) -> None:
    """Without a grant, a missing bucket and an existing one answer alike: no probing."""
    beta = project_access(user=outsider, slug="beta")
    with pytest.raises(services.BucketNotGranted):
        services.bucket_attach(access=beta, by=outsider, name=name)


def test_the_api_answers_403_and_the_page_says_whom_to_ask(
    datastore: DatastoreConfig, owner_api: APIClient, owner_client: Client, name: str
) -> None:
    _theirs(datastore, name)
    response = owner_api.post(
        "/api/v1/buckets/attach/?project=alpha", {"name": name}, format="json"
    )
    assert response.status_code == 403
    assert response.json() == {
        "detail": f"Attaching an existing bucket needs an admin's grant: ask an admin to grant "
        f"{name} on LOCAL to the project alpha."
    }
    page = owner_client.post(
        "/p/alpha/buckets/", {"name": name, "datastore": "LOCAL", "action": "attach"}
    )
    assert page.status_code == 400
    assert f"ask an admin to grant {name} on LOCAL to the project alpha." in unescape(
        page.content.decode()
    )
    assert not Bucket.objects.exists()


def test_a_grant_lets_that_project_attach_and_only_that_project(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    outsider: Any,
    admin_user: Any,
    name: str,
) -> None:
    _theirs(datastore, name)
    _grant(access.project, name, by=admin_user)
    beta = project_access(user=outsider, slug="beta")
    with pytest.raises(services.BucketNotGranted):
        services.bucket_attach(access=beta, by=outsider, name=name)
    bucket = services.bucket_attach(access=access, by=owner, name=name)
    assert (bucket.project, bucket.origin) == (access.project, "attached")


def test_a_site_admin_may_attach_without_a_grant(
    datastore: DatastoreConfig, project: Project, admin_user: Any, name: str
) -> None:
    objects.create_bucket(datastore, bucket=name)
    as_admin = project_access(user=admin_user, slug=project.slug)
    assert services.bucket_attach(access=as_admin, by=admin_user, name=name).project == project


def test_the_list_page_offers_the_grants_not_yet_attached(
    datastore: DatastoreConfig, owner_client: Client, project: Project, admin_user: Any, name: str
) -> None:
    objects.create_bucket(datastore, bucket=name)
    _grant(project, name, by=admin_user)
    page = owner_client.get("/p/alpha/buckets/").content.decode()
    assert 'data-testid="grants"' in page and f'data-grant="{name}"' in page
    assert "by admin" in page
    done = owner_client.post(
        "/p/alpha/buckets/", {"name": name, "datastore": "LOCAL", "action": "attach"}, follow=True
    )
    assert f"Bucket {name} attached." in done.content.decode()
    assert 'data-testid="grants"' not in done.content.decode()  # attached: no longer offered


def test_admins_grant_in_the_admin_and_a_bucket_held_elsewhere_is_refused(
    datastore: DatastoreConfig,
    project: Project,
    other_project: Project,
    admin_user: Any,
    outsider: Any,
    name: str,
) -> None:
    client = logged_in(admin_user)
    body = {"datastore": "LOCAL", "name": name, "project": project.pk, "note": "lab data"}
    for bad, text in [
        ({"name": "Bad_Name"}, "uppercase letter 'B' at position 0"),
        ({"datastore": "GRA"}, "No datastore is named 'GRA' (known: LOCAL)."),
    ]:
        response = client.post("/admin/buckets/bucketgrant/add/", {**body, **bad})
        assert response.status_code == 200
        assert text in unescape(response.content.decode())
    assert client.post("/admin/buckets/bucketgrant/add/", body).status_code == 302
    grant = BucketGrant.objects.get()
    assert (grant.project, grant.granted_by, grant.note) == (project, admin_user, "lab data")
    # One grant per bucket; one held by another project is detached there first.
    beta = project_access(user=outsider, slug="beta")
    services.bucket_create(access=beta, by=outsider, name="x" + name)
    held = {**body, "name": "x" + name}
    response = client.post("/admin/buckets/bucketgrant/add/", held)
    assert f"x{name}@LOCAL is attached to the project beta: detach it there first." in unescape(
        response.content.decode()
    )
    response = client.post("/admin/buckets/bucketgrant/add/", {**body, "project": other_project.pk})
    assert "already exists" in unescape(response.content.decode())
    assert BucketGrant.objects.count() == 1


def test_create_refuses_a_bucket_the_keys_already_own_on_a_200_server(
    settings: Any, moto_s3: DatastoreConfig, access: ProjectAccess, owner: Any, name: str
) -> None:
    """moto answers 200 to CreateBucket on a bucket these keys own (AWS in us-east-1 too):
    'create' must still not hand that bucket, and its data, to the project."""
    settings.S3_ENDPOINT_URL, settings.S3_ALIAS = moto_s3.endpoint_url, "LOCAL"
    settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY = moto_s3.access_key, moto_s3.secret_key
    settings.S3_REGION, settings.S3_CORS_ORIGINS = "us-east-1", ["http://testserver"]
    client = make_s3_client(moto_s3)
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key="secret.csv", Body=b"theirs")
    again = client.create_bucket(Bucket=name)  # the server's own answer: no refusal
    assert again["ResponseMetadata"]["HTTPStatusCode"] == 200
    try:
        with pytest.raises(Exception) as refused:
            services.bucket_create(access=access, by=owner, name=name)
        assert "already exists on LOCAL" in str(refused.value)
        assert not Bucket.objects.exists()
        assert _rules(moto_s3, name) == []  # no CORS set on it either
    finally:
        objects.delete_bucket(moto_s3, bucket=name, force=True)


def test_a_detach_takes_back_the_rule_ajuste_added_and_only_that_rule(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, admin_user: Any, name: str
) -> None:
    _theirs(datastore, name)
    _grant(access.project, name, by=admin_user)
    bucket = services.bucket_attach(access=access, by=owner, name=name)
    assert Bucket.objects.get(pk=bucket.pk).cors_origins_added == ["http://testserver"]
    assert _origins(datastore, name) == [["https://their.app"], ["http://testserver"]]
    assert services.bucket_delete(access=access, bucket=bucket) is True  # a detach
    assert _origins(datastore, name) == [["https://their.app"]]
    assert _rules(datastore, name)[0]["AllowedMethods"] == ["GET"]


def test_a_detach_leaves_rules_that_already_allowed_us(
    datastore: DatastoreConfig, access: ProjectAccess, owner: Any, admin_user: Any, name: str
) -> None:
    objects.create_bucket(datastore, bucket=name)
    objects.set_bucket_cors(datastore, bucket=name, origins=["http://testserver"])  # the owner's
    _grant(access.project, name, by=admin_user)
    bucket = services.bucket_attach(access=access, by=owner, name=name)
    assert bucket.cors_origins_added == []  # nothing added: nothing to take back
    services.bucket_delete(access=access, bucket=bucket)
    assert _origins(datastore, name) == [["http://testserver"]]


def test_a_detach_goes_through_when_the_rule_cannot_be_removed(
    datastore: DatastoreConfig,
    access: ProjectAccess,
    owner: Any,
    admin_user: Any,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objects.create_bucket(datastore, bucket=name)
    _grant(access.project, name, by=admin_user)
    bucket = services.bucket_attach(access=access, by=owner, name=name)

    def refuse(*args: Any, **kwargs: Any) -> bool:
        raise StorageError("AccessDenied: no", code="AccessDenied")

    monkeypatch.setattr(objects, "remove_bucket_cors", refuse)
    assert services.bucket_delete(access=access, bucket=bucket) is True
    assert not Bucket.objects.exists()
