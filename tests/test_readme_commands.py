"""The README's `manage.py` commands work as written in a checkout where `make run` ran, with
nothing exported but what a user may have left in their shell (`DJANGO_SUPERUSER_USERNAME`)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controlpanel.runenv import FILE_NAME, load_run_env, save_run_env
from tests.envdefaults import outside_variable

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _user_shell(var: Path) -> dict[str, str]:
    """A shell as a user has it: none of the test session's settings, one stray variable."""
    env = {k: v for k, v in os.environ.items() if not outside_variable(k)}
    # Only so this test's `make run` keeps to its own folder and ports, not the checkout's var/.
    env["AJUSTE_VAR_DIR"] = str(var)
    env["DJANGO_SUPERUSER_USERNAME"] = "someone"
    return env


def readme_manage_commands() -> list[list[str]]:
    """Every `python manage.py ...` the README shows, placeholders filled the obvious way."""
    text = (ROOT / "README.md").read_text()
    found = re.findall(r"`(python manage\.py [^`]+)`", text)
    commands = []
    for command in dict.fromkeys(found):
        command = command.replace("<username>", "admin").replace(" [--name NAME]", "")
        commands.append(shlex.split(command))
    return commands


# What seed_history made: how many, how many not finished, in which projects.
SEEDED = (
    "from django.apps import apps; W = apps.get_model('workloads', 'Workload'); "
    "s = W.objects.filter(labels__demo='seed_history'); "
    "print(s.count(), s.filter(finished_at=None).count(), "
    "*sorted(set(s.values_list('project__slug', flat=True))))"
)


@pytest.fixture
def made_run(tmp_path: Path) -> Iterator[tuple[dict[str, str], str]]:
    """`make run` (python -m controlpanel.run) on free ports; its shell env and URL."""
    var = tmp_path / "var"
    env = _user_shell(var)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    run_env = env | {
        "AJUSTE_BIND": f"127.0.0.1:{port}",
        "SITE_URL": url,
        "AJUSTE_S3_PORT": str(_free_port()),
        "AJUSTE_REDIS_PORT": str(_free_port()),
        "WEB_WORKERS": "1",
        "WORKER_CONCURRENCY": "1",
    }
    log = (tmp_path / "make-run.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "controlpanel.run"],
        cwd=ROOT,
        env=run_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while "Ajuste is up" not in (tmp_path / "make-run.log").read_text(errors="replace"):
            assert proc.poll() is None, (tmp_path / "make-run.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "make-run.log").read_text()[-3000:]
            time.sleep(0.5)
        yield env, url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _manage(env: dict[str, str], argv: list[str], **extra: str) -> str:
    assert argv[:2] == ["python", "manage.py"]
    done = subprocess.run(
        [sys.executable, "manage.py", *argv[2:]],
        cwd=ROOT,
        env=env | extra,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.e2e
def test_readme_manage_commands_after_make_run(made_run: tuple[dict[str, str], str]) -> None:
    env, url = made_run
    commands = readme_manage_commands()
    names = {tuple(c[2:3]) for c in commands}
    assert {("apitoken",), ("createsuperuser",)} <= names, commands
    for argv in commands:
        # createsuperuser --noinput reads DJANGO_SUPERUSER_*, as the README says.
        out = _manage(
            env,
            argv,
            DJANGO_SUPERUSER_PASSWORD="a-long-password-for-someone",
            DJANGO_SUPERUSER_EMAIL="someone@example.com",
        )
        if argv[2] == "apitoken":
            token = out.strip().splitlines()[-1]
            me = httpx.get(f"{url}/api/v1/me/", headers={"Authorization": f"Bearer {token}"})
            assert me.status_code == 200, me.text
            # The admin `make run` made is `admin`: a stray DJANGO_SUPERUSER_USERNAME without its
            # password does not rename it.
            assert me.json()["username"] == "admin"
    # The dashboards' tip seeded history that is over, in a project of its own: it holds no
    # quota a newcomer's next job would wait behind (#32).
    assert ("seed_history",) in names
    seeded = _manage(env, ["python", "manage.py", "shell", "-v", "0", "-c", SEEDED]).split()
    assert seeded == ["2000", "0", "history"], seeded
    someone = _manage(env, ["python", "manage.py", "apitoken", "someone"]).strip()
    me = httpx.get(f"{url}/api/v1/me/", headers={"Authorization": f"Bearer {someone}"})
    assert me.json()["username"] == "someone"


def test_run_env_is_private_and_loses_to_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    var = tmp_path / "var"
    var.mkdir()
    path = save_run_env(
        var, {"SECRET_KEY": "from-make-run", "REDIS_URL": "redis://x/1", "HOME": "/nope"}
    )
    assert path.name == FILE_NAME
    assert path.stat().st_mode & 0o777 == 0o600
    assert "HOME" not in path.read_text()  # only the settings make run chose
    monkeypatch.delenv("AJUSTE_VAR_DIR", raising=False)
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("REDIS_URL", "redis://exported/2")
    load_run_env(tmp_path)  # the checkout's root: its var/ holds run.env
    assert os.environ["SECRET_KEY"] == "from-make-run"
    assert os.environ["REDIS_URL"] == "redis://exported/2"


def test_the_test_session_cleans_every_variable_the_code_reads() -> None:
    """A setting added later is cleaned too, or this fails: a user's shell never leaks in."""
    read = set()
    for package in ("controlpanel", "deploy", "storage"):
        for path in (ROOT / package).rglob("*.py"):
            read |= set(
                re.findall(r'env_(?:str|bool|int|list|choice)\("([A-Z_0-9]+)"', path.read_text())
            )
    assert len(read) > 30
    assert sorted(name for name in read if not outside_variable(name)) == []
