"""OIDC_* and INVITATION_DAYS from the environment: a bad value stops start-up naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from controlpanel.accounts.oidc_settings import GroupRule, parse_group_mapping, read_oidc_settings

ROOT = Path(__file__).resolve().parents[3]


def test_defaults_leave_sso_off(monkeypatch: pytest.MonkeyPatch) -> None:
    config = read_oidc_settings()
    assert config["OIDC_ISSUER"] == "" and config["OIDC_ONLY"] is False
    assert config["OIDC_GROUP_MAPPING"] == ()


def test_a_full_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("OIDC_ISSUER", "https://sso.example.com/realms/acme/")
    monkeypatch.setenv("OIDC_CLIENT_ID", "ajuste")
    monkeypatch.setenv("OIDC_CLIENT_SECRET_FILE", str(secret))
    monkeypatch.setenv("OIDC_SCOPES", "email,profile groups")
    monkeypatch.setenv(
        "OIDC_GROUP_MAPPING", "/acme/ml=vision:manager, ops=vision\nops=infra:member"
    )
    monkeypatch.setenv("OIDC_ONLY", "1")
    config = read_oidc_settings()
    assert config["OIDC_ISSUER"] == "https://sso.example.com/realms/acme"
    assert config["OIDC_DISCOVERY_URL"] == (
        "https://sso.example.com/realms/acme/.well-known/openid-configuration"
    )
    assert config["OIDC_CLIENT_SECRET"] == "s3cret"
    assert config["OIDC_SCOPES"] == "openid email profile groups"
    assert config["OIDC_GROUP_MAPPING"] == (
        GroupRule("/acme/ml", "vision", "manager"),
        GroupRule("ops", "vision", "member"),
        GroupRule("ops", "infra", "member"),
    )
    assert config["OIDC_ONLY"] is True


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ml-team", "is not GROUP=PROJECT:ROLE"),
        ("ml-team=", "is not GROUP=PROJECT:ROLE"),
        ("=vision:member", "is not GROUP=PROJECT:ROLE"),
        ("ml=vision:owner", "use member or manager"),
        ("ml=vision:", "names no role"),
    ],
)
def test_a_bad_mapping_is_refused_precisely(text: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=says):
        parse_group_mapping(text)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OIDC_ISSUER": "https://sso.example.com"}, "OIDC_CLIENT_ID"),
        ({"OIDC_ONLY": "1"}, "OIDC_ISSUER"),
        ({"OIDC_ISSUER": "sso.example.com", "OIDC_CLIENT_ID": "x"}, "OIDC_ISSUER"),
        ({"OIDC_DISCOVERY_URL": "https://x/.well-known/openid-configuration"}, "OIDC_ISSUER"),
        # Retired (issue 25): it linked sign-ins to accounts by an address nobody verified.
        ({"OIDC_TRUST_EMAIL": "1"}, "OIDC_TRUST_EMAIL is retired"),
    ],
)
def test_inconsistent_settings_are_refused(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], says: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=says):
        read_oidc_settings()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OIDC_GROUP_MAPPING": "ml=vision:boss"}, "OIDC_GROUP_MAPPING"),
        ({"INVITATION_DAYS": "0"}, "INVITATION_DAYS"),
    ],
)
def test_a_bad_value_stops_startup(env: dict[str, str], named: str) -> None:
    base = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=base | {"DEBUG": "1"} | env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and named in result.stderr
