"""What a project's pods hold: keys narrowed to its own buckets where the datastore can issue
them (the embedded store's scoped keys against the real s3rver, STS against moto), its Secret
without the keys of a datastore it has left, and the admin page that says what remains."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.buckets import services
from controlpanel.buckets.credentials import pod_datastore_configs
from controlpanel.buckets.models import Bucket, CredentialMode, Datastore, PodCredential
from controlpanel.engine.backend import project_request
from controlpanel.projects.access import project_access
from controlpanel.projects.models import Project
from deploy.manifests import make_datastore_secret
from storage import credentials, objects
from storage.datastore import DatastoreConfig
from storage.errors import AccessDenied
from tests.fixtures.panel import logged_in

pytestmark = pytest.mark.django_db(transaction=True)
ROLE = "arn:aws:iam::123456789012:role/ajuste-pods"


@pytest.fixture
def scoped_mode(settings: Any, datastore: DatastoreConfig) -> DatastoreConfig:
    settings.S3_CREDENTIAL_MODE = "embedded-scoped"
    return datastore


def _bucket(project: Project, user: Any, name: str) -> Bucket:
    access = project_access(user=user, slug=project.slug)
    return services.bucket_create(access=access, by=user, name=name)


def _pod_config(project: Project) -> DatastoreConfig:
    (config,) = pod_datastore_configs(project=project)
    return config


def _denied(call: Callable[[], object]) -> None:
    with pytest.raises(AccessDenied):
        call()


def test_a_projects_pod_keys_cannot_reach_another_projects_bucket(
    scoped_mode: DatastoreConfig,
    project: Project,
    other_project: Project,
    owner: Any,
    outsider: Any,
    name: str,
) -> None:
    mine, theirs = f"{name}-a", f"{name}-b"
    _bucket(project, owner, mine)
    _bucket(other_project, outsider, theirs)
    objects.put_object(scoped_mode, bucket=theirs, key="secret.txt", data=b"beta's")

    pod = _pod_config(project)
    assert pod.access_key != scoped_mode.access_key  # never the store's root key
    objects.put_object(pod, bucket=mine, key="ckpt/1.bin", data=b"alpha's")
    assert [o.key for o in objects.iter_objects(pod, bucket=mine)] == ["ckpt/1.bin"]
    _denied(lambda: objects.list_objects(pod, bucket=theirs))
    _denied(lambda: objects.read_object(pod, bucket=theirs, key="secret.txt", max_bytes=99))
    _denied(lambda: objects.put_object(pod, bucket=theirs, key="x", data=b"x"))
    _denied(lambda: objects.list_buckets(pod))

    # the Secret the cluster gets holds these keys, never the root ones
    secret = make_datastore_secret(project=project_request(project))["stringData"]
    assert secret["LOCAL.access_key"] == pod.access_key
    assert scoped_mode.secret_key not in secret.values()


def test_keys_are_reused_and_follow_the_projects_buckets(
    scoped_mode: DatastoreConfig, project: Project, owner: Any, name: str
) -> None:
    first = _bucket(project, owner, f"{name}-a")
    pod = _pod_config(project)
    assert _pod_config(project) == pod  # a reconcile issues nothing new
    _bucket(project, owner, f"{name}-b")
    widened = _pod_config(project)
    assert widened.access_key == pod.access_key
    assert credentials.embedded_keys(scoped_mode)[pod.access_key] == (f"{name}-a", f"{name}-b")
    objects.list_objects(widened, bucket=f"{name}-b")

    # deleting a bucket narrows the key at once (its name is free for another project)
    access = project_access(user=owner, slug=project.slug)
    assert services.bucket_delete(access=access, bucket=first) is True
    assert credentials.embedded_keys(scoped_mode)[pod.access_key] == (f"{name}-b",)
    _denied(lambda: objects.list_objects(pod, bucket=f"{name}-a"))


def test_the_last_bucket_gone_revokes_the_key_and_empties_the_secret(
    scoped_mode: DatastoreConfig, project: Project, owner: Any, name: str
) -> None:
    bucket = _bucket(project, owner, name)
    pod = _pod_config(project)
    assert (
        "LOCAL.secret_key" in make_datastore_secret(project=project_request(project))["stringData"]
    )
    access = project_access(user=owner, slug=project.slug)
    services.bucket_delete(access=access, bucket=bucket)

    assert pod.access_key not in credentials.embedded_keys(scoped_mode)
    assert not PodCredential.objects.filter(project=project).exists()
    assert project_request(project).datastores == ()
    assert make_datastore_secret(project=project_request(project))["stringData"] == {}
    _denied(lambda: objects.list_buckets(pod))


def test_shared_mode_hands_out_the_datastores_keys_and_a_switch_revokes_scoped_ones(
    settings: Any, scoped_mode: DatastoreConfig, project: Project, owner: Any, name: str
) -> None:
    _bucket(project, owner, name)
    pod = _pod_config(project)
    settings.S3_CREDENTIAL_MODE = "shared"
    assert _pod_config(project) == scoped_mode
    assert pod.access_key not in credentials.embedded_keys(scoped_mode)
    assert not PodCredential.objects.exists()


def test_a_store_that_cannot_issue_keys_fails_the_launch_with_the_reason(
    settings: Any, moto_s3: DatastoreConfig, project: Project, owner: Any
) -> None:
    """moto is no embedded store: no fallback to the shared keys, a DeployError instead."""
    from controlpanel.engine.datastores import project_datastores
    from deploy.types import DeployError

    settings.S3_ENDPOINT_URL = moto_s3.endpoint_url
    settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY = moto_s3.access_key, moto_s3.secret_key
    settings.S3_CREDENTIAL_MODE = "embedded-scoped"
    Bucket.objects.create(project=project, datastore="LOCAL", name="moto-bucket")
    with pytest.raises(DeployError, match="pod credentials could not be issued"):
        project_datastores(project=project)


def test_sts_mode_assumes_the_role_per_project_and_renews_at_half_life(
    settings: Any, moto_s3: DatastoreConfig, project: Project, owner: Any
) -> None:
    settings.S3_ENDPOINT_URL = moto_s3.endpoint_url
    settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY = moto_s3.access_key, moto_s3.secret_key
    settings.S3_ALIAS = "LOCAL"
    settings.S3_CREDENTIAL_MODE = "sts"
    settings.S3_ROLE_ARN = ROLE
    settings.S3_STS_ENDPOINT_URL = ""
    settings.S3_CREDENTIAL_DURATION_S = 3600
    Bucket.objects.create(project=project, datastore="LOCAL", name="alpha-data")

    pod = _pod_config(project)
    assert pod.session_token and pod.access_key != moto_s3.access_key
    assert pod.endpoint_url == moto_s3.endpoint_url
    row = PodCredential.objects.get(project=project)
    assert row.mode == CredentialMode.STS and row.buckets == ["alpha-data"]
    assert row.expires_at is not None
    assert _pod_config(project) == pod  # still fresh: reused
    files = make_datastore_secret(project=project_request(project))["stringData"]
    assert files["LOCAL.session_token"] == pod.session_token

    # past half its life, the next launch gets new keys
    row.issued_at = timezone.now() - timedelta(minutes=40)
    row.expires_at = row.issued_at + timedelta(hours=1)
    row.save()
    renewed = _pod_config(project)
    assert renewed.access_key != pod.access_key


# ---- the admin page ------------------------------------------------------------------------


def _admin_post(admin_user: Any, **changes: str) -> Any:
    data = {
        "alias": "GRA",
        "endpoint_url": "https://s3.gra.example.net",
        "public_endpoint_url": "",
        "region": "gra",
        "access_key": "AKIAEXAMPLE0001234",
        "secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY",
        "credential_mode": "shared",
        "role_arn": "",
        "sts_endpoint_url": "",
        "credential_duration_s": "3600",
        **changes,
    }
    return logged_in(admin_user).post("/admin/buckets/datastore/add/", data)


def test_admin_page_states_the_blast_radius_of_shared_keys(admin_user: Any) -> None:
    response = _admin_post(admin_user)
    assert response.status_code == 302, response.content.decode()[:2000]
    datastore = Datastore.objects.get(alias="GRA")
    assert datastore.credential_mode == CredentialMode.SHARED
    page = logged_in(admin_user).get(f"/admin/buckets/datastore/{datastore.pk}/change/")
    text = page.content.decode()
    assert "What pods can reach" in text
    assert "other projects&#x27; included" in text or "other projects' included" in text


def test_admin_refuses_sts_without_a_role_and_scoped_keys_on_a_foreign_store(
    admin_user: Any, moto_s3: DatastoreConfig
) -> None:
    response = _admin_post(admin_user, credential_mode="sts")
    assert response.status_code == 200
    assert "STS needs the role" in response.content.decode()
    response = _admin_post(admin_user, credential_mode="sts", role_arn="ajuste-pods")
    assert "is not a role ARN" in response.content.decode()
    response = _admin_post(
        admin_user,
        credential_mode="embedded-scoped",
        endpoint_url=moto_s3.endpoint_url,
        access_key=moto_s3.access_key,
        secret_key=moto_s3.secret_key,
    )
    assert response.status_code == 200
    assert "does not issue scoped keys" in response.content.decode()
    assert not Datastore.objects.exists()
    response = _admin_post(admin_user, credential_mode="sts", role_arn=ROLE)
    assert response.status_code == 302
    assert Datastore.objects.get(alias="GRA").role_arn == ROLE


def test_a_stored_embedded_datastore_issues_scoped_keys(
    admin_user: Any, embedded_s3: Any, project: Project, owner: Any, name: str
) -> None:
    root = embedded_s3.config(alias="EMB")
    response = _admin_post(
        admin_user,
        alias="EMB",
        endpoint_url=root.endpoint_url,
        access_key=root.access_key,
        secret_key=root.secret_key,
        region=root.region,
        credential_mode="embedded-scoped",
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    objects.create_bucket(root, bucket=name)
    try:
        Bucket.objects.create(project=project, datastore="EMB", name=name)
        pod = _pod_config(project)
        assert pod.alias == "EMB" and pod.access_key != root.access_key
        assert objects.list_objects(pod, bucket=name).objects == []
        _denied(lambda: objects.list_buckets(pod))
        Bucket.objects.filter(project=project).delete()
        assert pod.access_key not in credentials.embedded_keys(root)
    finally:
        objects.delete_bucket(root, bucket=name, force=True)


@pytest.mark.k8s
def test_the_beat_renews_sts_keys_of_projects_with_live_work_into_their_secret(
    settings: Any,
    moto_s3: DatastoreConfig,
    project: Project,
    other_project: Project,
    owner: Any,
    k8s_cluster: Any,
    k8s_jobs: Any,
) -> None:
    """Jobs run for days, STS keys for hours: the periodic renewal re-issues them and re-applies
    the Secret the sync containers read their files from (they read them before each push)."""
    import base64

    from controlpanel.engine import tasks
    from controlpanel.jobs.states import JobState
    from tests.fixtures.jobs import submit

    settings.S3_ENDPOINT_URL = moto_s3.endpoint_url
    settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY = moto_s3.access_key, moto_s3.secret_key
    settings.S3_ALIAS, settings.S3_CREDENTIAL_MODE, settings.S3_ROLE_ARN = "LOCAL", "sts", ROLE
    settings.S3_STS_ENDPOINT_URL, settings.S3_CREDENTIAL_DURATION_S = "", 3600
    for each in (project, other_project):
        Bucket.objects.create(project=each, datastore="LOCAL", name=f"{each.slug}-data")
    job = submit(project, owner)
    type(job).objects.filter(pk=job.pk).update(state=JobState.RUNNING)

    assert tasks.pod_credentials_renew() == 1  # alpha only: beta has no live work
    first = PodCredential.objects.get(project=project)
    assert not PodCredential.objects.filter(project=other_project).exists()
    type(first).objects.filter(pk=first.pk).update(
        issued_at=timezone.now() - timedelta(minutes=40),
        expires_at=timezone.now() + timedelta(minutes=20),
    )
    assert tasks.pod_credentials_renew() == 1
    renewed = PodCredential.objects.get(project=project)
    assert renewed.access_key != first.access_key
    name = make_datastore_secret(project=project_request(project))["metadata"]["name"]
    data = k8s_cluster.get("secrets", project.namespace, name)["data"]
    assert base64.b64decode(data["LOCAL.access_key"]).decode() == renewed.access_key
