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
        },
        "--deploy",
        "--fail-level",
        "WARNING",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
