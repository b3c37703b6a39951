"""Settings come from the environment; a bad value stops start-up naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # The browser fixture allows sync ORM calls beside Playwright's loop in this process; a
    # deployment never sets that, and `check --deploy` rightly refuses it.
    dropped = {"DEBUG", "SECRET_KEY", "HTTPS", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    base = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
        cwd=ROOT,
        env=base | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"DEBUG": "maybe", "SECRET_KEY": "x"}, "DEBUG"),
        ({"DEBUG": "0"}, "SECRET_KEY"),
        ({"DEBUG": "1", "REDIS_URL": "http://nope"}, "REDIS_URL"),
        ({"DEBUG": "1", "COMPUTE_BACKEND": "slurm"}, "COMPUTE_BACKEND"),
        ({"DEBUG": "1", "AXES_FAILURE_LIMIT": "many"}, "AXES_FAILURE_LIMIT"),
        ({"DEBUG": "1", "SECRET_KEY_FILE": "/nonexistent/secret"}, "SECRET_KEY_FILE"),
        ({"DEBUG": "1", "KUBERNETES_EGRESS": "s3.example.com"}, "KUBERNETES_EGRESS"),
        ({"DEBUG": "1", "JOB_WORKSPACE_GIB": "big"}, "JOB_WORKSPACE_GIB"),
        ({"DEBUG": "1", "WEBHOOK_ALLOW_CIDRS": "intranet"}, "WEBHOOK_ALLOW_CIDRS"),
        ({"DEBUG": "1", "WEBHOOK_DENY_CIDRS": "10.0.0.0/33"}, "WEBHOOK_DENY_CIDRS"),
        ({"DEBUG": "1", "APP_SERVICE_URL": "http://{svc}.x"}, "APP_SERVICE_URL"),
        ({"DEBUG": "1", "APP_SERVICE_URL": "{service}:{port}"}, "APP_SERVICE_URL"),
        ({"DEBUG": "1", "KUBERNETES_PANEL_URL": "ajuste-web:80"}, "KUBERNETES_PANEL_URL"),
        ({"DEBUG": "1", "USER_CONTENT_DOMAIN": "*.uc.example.net"}, "USER_CONTENT_DOMAIN"),
        ({"DEBUG": "1", "NOTEBOOK_HOST": "ajuste.example.com"}, "NOTEBOOK_HOST is retired"),
        ({"DEBUG": "1", "APP_AUTH_URL": "http://x/auth/app"}, "APP_AUTH_URL is retired"),
    ],
)
def test_bad_value_stops_startup_naming_the_variable(env: dict[str, str], named: str) -> None:
    result = _check(env)
    assert result.returncode != 0
    assert named in result.stderr


def test_secret_from_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("a-very-long-secret-read-from-a-mounted-kubernetes-secret-file-0123456789\n")
    result = _check({"DEBUG": "0", "SECRET_KEY_FILE": str(secret)})
    assert result.returncode == 0, result.stderr


def test_deploy_check_is_clean_with_production_settings() -> None:
    result = _check(
        {
            "DEBUG": "0",
            "SECRET_KEY": "k" * 20 + "Zq9-v8!x#P2m@L5r$T7w%Y3n^B6c&D1f",
            "ALLOWED_HOSTS": "ajuste.example.com",
            "COMPUTE_BACKEND": "kubernetes",  # the local backend refuses a public host name
            "USER_CONTENT_DOMAIN": "usercontent.example.net",  # else ajuste.E110
        },
        "--deploy",
        "--fail-level",
        "WARNING",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def _shell(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    dropped = {"DEBUG", "SECRET_KEY", "SECRET_KEY_FALLBACKS", "FIELD_ENCRYPTION_KEY"}
    base = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=base | {"DEBUG": "1"} | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_secret_key_fallbacks_from_the_environment_keep_stored_credentials() -> None:
    """Rotating SECRET_KEY with the old one in SECRET_KEY_FALLBACKS: a datastore secret key
    encrypted under the old one still decrypts (FIELD_ENCRYPTION_KEY unset: derived keys)."""
    old, new = "old-" + "o" * 60, "new-" + "n" * 60
    stored = _shell(
        {"SECRET_KEY": old},
        "from controlpanel.buckets.crypto import encrypt;print(encrypt('s3-secret'))",
    )
    assert stored.returncode == 0, stored.stderr
    token = stored.stdout.strip().splitlines()[-1]
    read = f"from controlpanel.buckets.crypto import decrypt; print(decrypt({token!r}))"
    rotated = _shell({"SECRET_KEY": new, "SECRET_KEY_FALLBACKS": f"other,{old}"}, read)
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.strip().splitlines()[-1] == "s3-secret"
    lost = _shell({"SECRET_KEY": new}, read)
    assert lost.returncode != 0 and "SECRET_KEY_FALLBACKS" in lost.stderr


def test_behind_proxy_throttles_on_the_forwarded_client() -> None:
    code = "from django.conf import settings as s; print(s.AXES_CLIENT_IP_CALLABLE)"
    behind = _shell({"BEHIND_PROXY": "1"}, code)
    assert behind.stdout.split()[-1:] == ["controlpanel.accounts.client_ip.client_ip"], behind
    direct = _shell({}, code)
    assert direct.stdout.split()[-1:] == ["None"], direct
