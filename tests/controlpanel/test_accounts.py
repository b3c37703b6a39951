"""Log-in, throttling, log-out, password change and personal API tokens."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.accounts.models import ApiToken, User, hash_token
from controlpanel.accounts.services import token_create
from tests.fixtures.panel import PASSWORD


def test_wrong_password_is_said_and_keeps_the_username(owner: User) -> None:
    response = Client().post("/login/", {"username": "owner", "password": "wrong"})
    assert response.status_code == 200
    assert b"correct username and password" in response.content
    assert b'value="owner"' in response.content
    assert "_auth_user_id" not in Client().session


def test_login_then_logout(owner: User) -> None:
    client = Client()
    response = client.post("/login/", {"username": "owner", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get("/settings/").status_code == 200
    assert client.post("/logout/").status_code == 302
    assert client.get("/settings/").status_code == 302


def test_repeated_failures_are_throttled(owner: User, settings: Any) -> None:
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/login/", {"username": "owner", "password": "wrong"})
    locked = client.post("/login/", {"username": "owner", "password": PASSWORD})
    assert locked.status_code == 429
    assert b"Too many failed log-ins" in locked.content


def test_password_change(owner_client: Client, owner: User) -> None:
    bad = owner_client.post(
        "/password/", {"old_password": "nope", "new_password1": "x", "new_password2": "y"}
    )
    assert bad.status_code == 200 and b"incorrectly" in bad.content
    ok = owner_client.post(
        "/password/",
        {
            "old_password": PASSWORD,
            "new_password1": "a-new-long-passphrase-42",
            "new_password2": "a-new-long-passphrase-42",
        },
    )
    assert ok.status_code == 302
    owner.refresh_from_db()
    assert owner.check_password("a-new-long-passphrase-42")


def test_token_is_shown_once_and_stored_hashed(owner_client: Client, owner: User) -> None:
    response = owner_client.post("/settings/", {"name": "laptop <b>cli</b>"})
    assert response.status_code == 200
    token = ApiToken.objects.get(user=owner)
    raw = response.context["new_token"]
    assert token.digest == hash_token(raw) and raw not in token.digest
    assert b"laptop &lt;b&gt;cli&lt;/b&gt;" in response.content
    again = owner_client.get("/settings/")
    assert raw.encode() not in again.content


def test_token_form_rejects_bad_input(owner_client: Client, owner: User) -> None:
    past = (timezone.now() - timedelta(days=2)).date().isoformat()
    response = owner_client.post("/settings/", {"name": "", "expires_on": past})
    assert response.status_code == 400
    assert b"This field is required" in response.content
    assert b"in the past" in response.content
    assert not ApiToken.objects.exists()


def test_bearer_token_authenticates_and_records_use(owner: User) -> None:
    token, raw = token_create(user=owner, name="ci")
    client = APIClient()
    response = client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    assert response.json()["username"] == "owner"
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.parametrize("header", ["Bearer ajt_nonsense", "Bearer", "Bearer a b", "Bearer xyz"])
def test_invalid_token_is_401_json(owner: User, header: str) -> None:
    response = APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert "detail" in response.json()


def test_revoked_and_expired_tokens_are_401(owner_client: Client, owner: User) -> None:
    token, raw = token_create(user=owner, name="old")
    assert owner_client.post(f"/settings/tokens/{token.id}/revoke/").status_code == 302
    response = APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid, expired or revoked token."
    expiring, raw2 = token_create(
        user=owner, name="soon", expires_at=timezone.now() + timedelta(seconds=60)
    )
    ApiToken.objects.filter(pk=expiring.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {raw2}").status_code == 401


def test_cannot_revoke_someone_elses_token(outsider_client: Client, owner: User) -> None:
    token, _ = token_create(user=owner, name="mine")
    assert outsider_client.post(f"/settings/tokens/{token.id}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_apitoken_command_prints_a_working_token(owner: User) -> None:
    out = StringIO()
    call_command("apitoken", "owner", "--name", "script", stdout=out)
    raw = out.getvalue().strip()
    assert ApiToken.objects.get(user=owner).name == "script"
    assert APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    with pytest.raises(CommandError, match="No user named"):
        call_command("apitoken", "ghost")


def test_api_tokens_endpoint(owner_api: APIClient, owner: User) -> None:
    created = owner_api.post("/api/v1/tokens/", {"name": "robot"}, format="json")
    assert created.status_code == 201
    raw = created.json()["token"]
    listed = owner_api.get("/api/v1/tokens/").json()["results"]
    assert {t["name"] for t in listed} == {"tests", "robot"}
    assert all("token" not in t and "digest" not in t for t in listed)
    assert owner_api.delete(f"/api/v1/tokens/{created.json()['id']}/").status_code == 204
    assert APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert owner_api.post("/api/v1/tokens/", {"name": ""}, format="json").status_code == 400


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_a_token_made_with_a_token_never_outlives_it(owner: User) -> None:
    """A stolen short-lived token must not mint a lasting one."""
    ends = timezone.now() + timedelta(hours=1)
    parent, raw = token_create(user=owner, name="ci, one hour", expires_at=ends)
    api = _bearer(raw)
    unlimited = api.post("/api/v1/tokens/", {"name": "forever"}, format="json")
    assert unlimited.status_code == 201
    child = ApiToken.objects.get(pk=unlimited.json()["id"])
    assert (child.expires_at, child.parent) == (ends, parent)
    later = (ends + timedelta(days=30)).isoformat()
    refused = api.post("/api/v1/tokens/", {"name": "later", "expires_at": later}, format="json")
    assert refused.status_code == 400
    assert "cannot outlive it" in refused.json()["expires_at"][0]
    assert not ApiToken.objects.filter(name="later").exists()
    grandchild_raw = _bearer(unlimited.json()["token"]).post(
        "/api/v1/tokens/", {"name": "grandchild"}, format="json"
    )
    grandchild_raw = grandchild_raw.json()["token"]
    assert api.delete(f"/api/v1/tokens/{parent.pk}/").status_code == 204  # revoked: all go
    for token in (unlimited.json()["token"], grandchild_raw):
        assert _bearer(token).get("/api/v1/me/").status_code == 401


def test_a_token_made_in_a_session_has_no_parent(owner_client: Client, owner: User) -> None:
    owner_client.post("/settings/", {"name": "laptop"})
    assert ApiToken.objects.get(user=owner, name="laptop").parent is None


def test_behind_a_proxy_one_client_cannot_lock_out_another(owner: User, settings: Any) -> None:
    """Every request reaches the panel from the proxy's address; throttling must key on the
    client the proxy names (its own entry, the rightmost), not on what a client wrote."""
    settings.AXES_CLIENT_IP_CALLABLE = "controlpanel.accounts.client_ip.client_ip"
    settings.AXES_TRUSTED_PROXY_COUNT = 1
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    attacker = Client(**proxy, HTTP_X_FORWARDED_FOR="198.51.100.7, 203.0.113.66")
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        attacker.post("/login/", {"username": "owner", "password": "wrong"})
    assert attacker.post("/login/", {"username": "owner", "password": PASSWORD}).status_code == 429
    owner_from_home = Client(**proxy, HTTP_X_FORWARDED_FOR="198.51.100.7")  # the forged one
    response = owner_from_home.post("/login/", {"username": "owner", "password": PASSWORD})
    assert response.status_code == 302


@pytest.mark.parametrize(
    ("forwarded", "count", "expected"),
    [
        ("", 1, "10.0.0.2"),  # not through the proxy: the peer
        ("203.0.113.66", 1, "203.0.113.66"),
        ("1.2.3.4, 203.0.113.66", 1, "203.0.113.66"),  # the left part is the client's word
        ("1.2.3.4, 203.0.113.66, 10.1.1.1", 2, "203.0.113.66"),
        ("203.0.113.66", 2, "10.0.0.2"),  # fewer hops than proxies: not through them all
        ("1.2.3.4, not-an-address", 1, "10.0.0.2"),
        ("2001:db8::1", 1, "2001:db8::1"),
    ],
)
def test_client_ip_behind_proxies(
    forwarded: str, count: int, expected: str, settings: Any, rf: Any
) -> None:
    from controlpanel.accounts.client_ip import client_ip

    settings.AXES_TRUSTED_PROXY_COUNT = count
    request = rf.get("/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=forwarded)
    assert client_ip(request) == expected
