"""`ajuste login` (#32): asks for the address and a token (saying where to make one), checks
them, keeps them owner-only in the user's config dir; AJUSTE_URL / AJUSTE_TOKEN still win. And
the 'name the project' error says the CLI's -p / AJUSTE_PROJECT."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from controlpanel.accounts.services import token_create
from controlpanel.cli.main import cli
from tests.fixtures.panel import ProjectFactory, add_member

live = pytest.mark.django_db(transaction=True)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's config dir of its own, and nothing of AJUSTE_* exported."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("AJUSTE_URL", "AJUSTE_TOKEN", "AJUSTE_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "config" / "ajuste" / "credentials.json"


def ajuste(*args: str, input: str | None = None, **env: str) -> Result:
    return CliRunner().invoke(cli, list(args), input=input, env=env)


@live
def test_login_asks_checks_and_keeps_the_token_owner_only(
    live_server: Any, owner: Any, home: Path
) -> None:
    _, token = token_create(user=owner, name="laptop")
    result = ajuste("login", input=f"{live_server.url}\n{token}\n")
    assert result.exit_code == 0, result.output
    assert f"Make a personal API token on {live_server.url}/settings/" in result.output
    assert token not in result.output  # typed hidden, never echoed
    assert f"Logged in to {live_server.url} as owner" in result.output
    assert home.stat().st_mode & 0o777 == 0o600
    assert home.parent.stat().st_mode & 0o777 == 0o700
    assert json.loads(home.read_text()) == {"url": live_server.url, "token": token}
    # the next command needs nothing exported
    listed = ajuste("-o", "json", "flavor", "list")
    assert listed.exit_code == 0, listed.output
    assert "ai1-1-cpu" in {flavor["name"] for flavor in json.loads(listed.stdout)}


@live
def test_the_environment_wins_over_what_login_kept(
    live_server: Any, owner: Any, home: Path
) -> None:
    _, token = token_create(user=owner, name="laptop")
    assert ajuste("login", "--url", live_server.url, "--token-stdin", input=token).exit_code == 0
    refused = ajuste("flavor", "list", AJUSTE_TOKEN="not-a-token")
    assert refused.exit_code == 1 and "HTTP 401" in refused.output
    elsewhere = ajuste("flavor", "list", AJUSTE_URL="http://127.0.0.1:9")
    assert elsewhere.exit_code == 1 and "cannot reach http://127.0.0.1:9" in elsewhere.output


@live
def test_a_refused_token_keeps_nothing(live_server: Any, owner: Any, home: Path) -> None:
    result = ajuste("login", input=f"{live_server.url}\nwrong-token\n")
    assert result.exit_code == 1
    assert f"refused this token (HTTP 401): copy it again from {live_server.url}/settings/" in (
        result.output
    )
    assert not home.exists()
    bad = ajuste("login", "--url", "ftp://example.com", "--token-stdin", input="x")
    assert bad.exit_code == 2 and "not an http:// or https:// address" in bad.output
    assert not home.exists()


def test_without_a_token_the_cli_points_at_login(home: Path) -> None:
    result = ajuste("flavor", "list")
    assert result.exit_code == 2
    assert "No API token: set AJUSTE_TOKEN (or --token), or run `ajuste login`" in result.output


def test_a_stored_file_is_written_private_from_the_first_byte(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlpanel.cli import login

    created: list[int] = []
    real_open = os.open

    def spy(path: Any, flags: int, mode: int = 0o777) -> int:
        created.append(mode)
        return real_open(path, flags, mode)

    monkeypatch.setattr(login.os, "open", spy)
    login.save_credentials(url="http://x", token="t")
    assert created == [0o600]


@live
def test_an_unnamed_project_error_names_the_flag_and_the_variable(
    live_server: Any, owner: Any, home: Path
) -> None:
    add_member(ProjectFactory(slug="gamma", name="Gamma"), owner)
    _, token = token_create(user=owner, name="cli")
    result = ajuste("job", "list", AJUSTE_URL=live_server.url, AJUSTE_TOKEN=token)
    assert result.exit_code == 2
    assert "Name the project: `ajuste -p alpha ...` (--project, before the command), or " in (
        result.output
    )
    assert "export AJUSTE_PROJECT=alpha." in result.output
    assert "Yours: alpha, gamma." in result.output
    named = ajuste("job", "list", "-o", "json", AJUSTE_URL=live_server.url, AJUSTE_TOKEN=token,
                   AJUSTE_PROJECT="gamma")  # fmt: skip
    assert named.exit_code == 0, named.output
