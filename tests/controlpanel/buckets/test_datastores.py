"""Datastores: credentials encrypted at rest and never shown back; the default one from the
S3_* settings; `datastore_config(alias)` for the rest of the panel; admin and API."""

from __future__ import annotations

from html import unescape
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured, PermissionDenied, ValidationError
from django.db import connection
from rest_framework.test import APIClient

from controlpanel.buckets import crypto, services
from controlpanel.buckets.models import Datastore
from controlpanel.buckets.selectors import (
    DatastoreNotFound,
    datastore_config,
    datastore_list,
    datastore_origins,
)
from storage.datastore import DatastoreConfig
from tests.fixtures.panel import logged_in

pytestmark = pytest.mark.django_db
ACCESS = "AKIAEXAMPLE0001234"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY"


def _gra(admin_user: Any) -> Datastore:
    return services.datastore_create(
        by=admin_user,
        alias="GRA",
        endpoint_url="https://s3.gra.example.net/",
        region="gra",
        access_key=ACCESS,
        secret_key=SECRET,
    )


def _raw_columns(pk: int) -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT access_key, secret_key FROM buckets_datastore WHERE id = %s", [pk])
        return cursor.fetchone()


def test_credentials_are_encrypted_at_rest(admin_user: Any) -> None:
    datastore = _gra(admin_user)
    raw_access, raw_secret = _raw_columns(datastore.pk)
    assert ACCESS not in raw_access and SECRET not in raw_secret
    assert raw_secret.startswith("gAAAA")  # a Fernet token
    stored = Datastore.objects.get(pk=datastore.pk)
    assert (stored.access_key, stored.secret_key) == (ACCESS, SECRET)
    assert (stored.access_key_hint, stored.secret_key_hint) == ("AKIA…1234", "…TKEY")
    assert SECRET not in repr(stored) and ACCESS not in repr(stored) and ACCESS not in str(stored)


def test_keys_rotate_through_the_field_encryption_key_list(admin_user: Any, settings: Any) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.FIELD_ENCRYPTION_KEY = [old]
    pk = _gra(admin_user).pk
    settings.FIELD_ENCRYPTION_KEY = [new, old]  # new key first: old rows still open
    assert Datastore.objects.get(pk=pk).secret_key == SECRET
    settings.FIELD_ENCRYPTION_KEY = [new]
    with pytest.raises(crypto.DecryptionError, match="FIELD_ENCRYPTION_KEY") as error:
        Datastore.objects.get(pk=pk)
    assert SECRET not in str(error.value)


def test_the_derived_key_follows_secret_key_fallbacks(admin_user: Any, settings: Any) -> None:
    pk = _gra(admin_user).pk
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-brand-new-secret-key-after-rotation-0123456789-abcdefghij"
    assert Datastore.objects.get(pk=pk).access_key == ACCESS


def test_a_bad_field_encryption_key_stops_start_up(settings: Any) -> None:
    settings.FIELD_ENCRYPTION_KEY = ["not-a-fernet-key"]
    with pytest.raises(ImproperlyConfigured, match="FIELD_ENCRYPTION_KEY: key #1"):
        crypto.check_keys()


def test_only_admins_add_datastores_and_aliases_are_checked(
    admin_user: Any, owner: Any, settings: Any
) -> None:
    with pytest.raises(PermissionDenied):
        _gra(owner)
    with pytest.raises(ValidationError) as error:
        services.datastore_create(
            by=admin_user,
            alias="9bad",
            endpoint_url="https://x.example",
            access_key="a",
            secret_key="b",
        )
    assert "must start with a letter" in str(error.value.message_dict["alias"])
    settings.S3_ENDPOINT_URL, settings.S3_ALIAS = "http://127.0.0.1:9", "LOCAL"
    with pytest.raises(ValidationError, match="default datastore"):
        services.datastore_create(
            by=admin_user,
            alias="LOCAL",
            endpoint_url="https://x.example",
            access_key="a",
            secret_key="b",
        )


def test_datastore_config_reads_settings_then_the_database(admin_user: Any, settings: Any) -> None:
    settings.S3_ENDPOINT_URL, settings.S3_ALIAS = "http://127.0.0.1:9100", "LOCAL"
    settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY, settings.S3_REGION = "ak", "sk", "us-east-1"
    _gra(admin_user)
    assert datastore_config("LOCAL") == DatastoreConfig(
        "LOCAL", "http://127.0.0.1:9100", "us-east-1", "ak", "sk"
    )
    assert datastore_config("GRA") == DatastoreConfig(
        "GRA", "https://s3.gra.example.net", "gra", ACCESS, SECRET
    )
    with pytest.raises(DatastoreNotFound):
        datastore_config("SBG")
    assert [(d.alias, d.is_default) for d in datastore_list()] == [("LOCAL", True), ("GRA", False)]
    assert datastore_origins() == ["http://127.0.0.1:9100", "https://s3.gra.example.net"]


def test_the_public_endpoint_is_used_for_browsers_only(admin_user: Any, settings: Any) -> None:
    settings.S3_ENDPOINT_URL, settings.S3_ALIAS = "http://minio:9000", "LOCAL"
    settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY = "ak", "sk"
    settings.S3_PUBLIC_ENDPOINT_URL = "http://localhost:9000"
    services.datastore_create(
        by=admin_user,
        alias="GRA",
        endpoint_url="http://s3.gra.internal:9000",
        public_endpoint_url="https://s3.gra.example.net/",
        access_key=ACCESS,
        secret_key=SECRET,
    )
    local, gra = datastore_config("LOCAL"), datastore_config("GRA")
    assert (local.endpoint_url, local.presign_endpoint_url) == (
        "http://minio:9000",
        "http://localhost:9000",
    )
    assert (gra.endpoint_url, gra.presign_endpoint_url) == (
        "http://s3.gra.internal:9000",
        "https://s3.gra.example.net",
    )
    assert datastore_origins() == ["http://localhost:9000", "https://s3.gra.example.net"]
    # Pods talk to the store from inside, as the panel does.
    assert gra.to_env()["AJUSTE_DATASTORE_GRA_ENDPOINT_URL"] == "http://s3.gra.internal:9000"


@pytest.mark.parametrize(
    ("existing", "alias"), [("GRA", "gra"), ("GRA", "Gra"), ("G_RA", "G-RA"), ("G-RA", "g_ra")]
)
def test_aliases_sharing_an_environment_prefix_are_refused(
    admin_user: Any, settings: Any, existing: str, alias: str
) -> None:
    settings.S3_ENDPOINT_URL = ""
    for name in (existing, "G_R_A"):  # G_R_A shares nothing with either
        services.datastore_create(
            by=admin_user,
            alias=name,
            endpoint_url="https://x.example",
            access_key="a",
            secret_key="b",
        )
    with pytest.raises(ValidationError) as error:
        services.datastore_create(
            by=admin_user,
            alias=alias,
            endpoint_url="https://y.example",
            access_key="a",
            secret_key="b",
        )
    prefix = "AJUSTE_DATASTORE_" + alias.upper().replace("-", "_") + "_"
    assert error.value.message_dict["alias"] == [
        f"{alias} would share the environment variables {prefix}* with the datastore "
        f"{existing}: choose an alias that differs by more than case or '-' and '_'."
    ]


def test_aliases_colliding_with_each_other_or_the_default_name_the_clash(
    admin_user: Any, settings: Any
) -> None:
    settings.S3_ENDPOINT_URL, settings.S3_ALIAS = "http://127.0.0.1:9", "LOCAL"
    _gra(admin_user)

    def refused(alias: str) -> str:
        with pytest.raises(ValidationError) as error:
            services.datastore_create(
                by=admin_user,
                alias=alias,
                endpoint_url="https://y.example",
                access_key="a",
                secret_key="b",
            )
        return error.value.message_dict["alias"][0]

    assert refused("gra") == (
        "gra would share the environment variables AJUSTE_DATASTORE_GRA_* with the datastore "
        "GRA: choose an alias that differs by more than case or '-' and '_'."
    )
    assert refused("GRA") == "A datastore named GRA already exists."
    assert refused("local").startswith(
        "local would share the environment variables AJUSTE_DATASTORE_LOCAL_* with the default "
        "datastore LOCAL (S3_ALIAS)"
    )
    assert refused("LOCAL") == "LOCAL is the default datastore (S3_ALIAS)."
    assert list(Datastore.objects.values_list("alias", flat=True)) == ["GRA"]


def test_the_admin_form_runs_the_same_alias_check(admin_user: Any, settings: Any) -> None:
    settings.S3_ENDPOINT_URL, settings.S3_ALIAS = "http://127.0.0.1:9", "LOCAL"
    datastore = _gra(admin_user)
    client = logged_in(admin_user)
    body = {
        "endpoint_url": "https://s3.bhs.example.net",
        "public_endpoint_url": "",
        "region": "bhs",
        "access_key": "a",
        "secret_key": "b",
    }
    for alias, text in [
        ("LOCAL", "LOCAL is the default datastore (S3_ALIAS)."),
        ("Local", "with the default datastore LOCAL (S3_ALIAS)"),
        ("gra", "gra would share the environment variables AJUSTE_DATASTORE_GRA_*"),
    ]:
        response = client.post("/admin/buckets/datastore/add/", {**body, "alias": alias})
        assert response.status_code == 200, alias
        assert text in unescape(response.content.decode()), alias
    assert list(Datastore.objects.values_list("alias", flat=True)) == ["GRA"]
    # Editing a datastore keeps its own alias; a public endpoint is saved without its '/'.
    edit = {**body, "alias": "GRA", "public_endpoint_url": "https://pub.gra.example.net/"}
    response = client.post(f"/admin/buckets/datastore/{datastore.pk}/change/", edit)
    assert response.status_code == 302
    assert datastore_config("GRA").public_endpoint_url == "https://pub.gra.example.net"


def test_api_lists_datastores_without_credentials(admin_user: Any, owner_api: APIClient) -> None:
    _gra(admin_user)
    response = owner_api.get("/api/v1/datastores/")
    assert response.status_code == 200
    assert response.json() == [
        {
            "alias": "GRA",
            "endpoint_url": "https://s3.gra.example.net",
            "region": "gra",
            "public_endpoint_url": "",
            "is_default": False,
        }
    ]
    assert SECRET not in response.content.decode() and ACCESS not in response.content.decode()


def test_api_creates_datastores_for_admins_only(admin_user: Any, owner_api: APIClient) -> None:
    body = {
        "alias": "SBG",
        "endpoint_url": "https://s3.sbg.example.net",
        "region": "sbg",
        "public_endpoint_url": "https://s3-public.sbg.example.net/",
        "access_key": ACCESS,
        "secret_key": SECRET,
    }
    assert owner_api.post("/api/v1/datastores/", body, format="json").status_code == 403
    admin = APIClient()
    admin.force_authenticate(admin_user)
    response = admin.post("/api/v1/datastores/", body, format="json")
    assert response.status_code == 201
    assert response.json() == {
        "alias": "SBG",
        "endpoint_url": "https://s3.sbg.example.net",
        "region": "sbg",
        "public_endpoint_url": "https://s3-public.sbg.example.net",
        "access_key_hint": "AKIA…1234",
        "secret_key_hint": "…TKEY",
    }
    assert datastore_config("SBG").secret_key == SECRET
    assert datastore_config("SBG").presign_endpoint_url == "https://s3-public.sbg.example.net"
    assert admin.post("/api/v1/datastores/", body, format="json").status_code == 400


def test_admin_pages_never_render_the_credentials(admin_user: Any) -> None:
    datastore = _gra(admin_user)
    client = logged_in(admin_user)
    page = client.get(f"/admin/buckets/datastore/{datastore.pk}/change/").content.decode()
    listing = client.get("/admin/buckets/datastore/").content.decode()
    for html in (page, listing):
        assert SECRET not in html and ACCESS not in html
    assert "AKIA…1234" in page
    # Saving without retyping the credentials keeps them.
    response = client.post(
        f"/admin/buckets/datastore/{datastore.pk}/change/",
        {
            "alias": "GRA",
            "endpoint_url": "https://s3.gra2.example.net",
            "region": "gra",
            "access_key": "",
            "secret_key": "",
        },
    )
    assert response.status_code == 302
    assert datastore_config("GRA").secret_key == SECRET
    assert datastore_config("GRA").endpoint_url == "https://s3.gra2.example.net"


def test_admin_requires_credentials_for_a_new_datastore(admin_user: Any) -> None:
    response = logged_in(admin_user).post(
        "/admin/buckets/datastore/add/",
        {
            "alias": "BHS",
            "endpoint_url": "https://s3.bhs.example.net",
            "region": "bhs",
            "access_key": "",
            "secret_key": "",
        },
    )
    assert response.status_code == 200
    assert "Required for a new datastore." in response.content.decode()
    assert not Datastore.objects.filter(alias="BHS").exists()


def test_a_bucket_whose_datastore_was_removed_says_so(
    owner_client: Any, owner_api: APIClient
) -> None:
    from controlpanel.buckets.models import Bucket
    from controlpanel.projects.models import Project

    Bucket.objects.create(project=Project.objects.get(slug="alpha"), datastore="OLD", name="gone")
    page = owner_client.get("/p/alpha/buckets/OLD/gone/")
    assert page.status_code == 502
    assert "The datastore OLD is no longer configured." in page.content.decode()
    api = owner_api.get("/api/v1/buckets/OLD/gone/objects/")
    assert (api.status_code, api.json()) == (
        502,
        {"detail": "The datastore OLD is no longer configured."},
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"S3_ENDPOINT_URL": "s3.example.net"}, "S3_ENDPOINT_URL"),
        ({"S3_ENDPOINT_URL": "https://s3.example.net"}, "S3_ACCESS_KEY"),
        ({"FIELD_ENCRYPTION_KEY": "short"}, "FIELD_ENCRYPTION_KEY"),
        ({"S3_PUBLIC_ENDPOINT_URL": "localhost:9000"}, "S3_PUBLIC_ENDPOINT_URL"),
        ({"S3_PUBLIC_ENDPOINT_URL": "http://"}, "S3_PUBLIC_ENDPOINT_URL"),
    ],
)
def test_bad_storage_settings_stop_start_up(env: dict[str, str], named: str) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    base = {k: v for k, v in os.environ.items() if not k.startswith(("S3_", "FIELD_"))}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        env=base | {"DEBUG": "1"} | env,
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert named in result.stderr
