"""`ajuste login`: ask for the panel's address and a personal API token (or say where to make
one), check them against the API, and keep them for the next commands in the user's config
directory (`click.get_app_dir`: ~/.config/ajuste/credentials.json on Linux), readable by the
user only. What the command line or AJUSTE_URL / AJUSTE_TOKEN give still wins
(`stored_defaults`, which the root group calls)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from controlpanel.cli.client import Api, ApiError, state

FILE_NAME = "credentials.json"


def credentials_path() -> Path:
    return Path(click.get_app_dir("ajuste")) / FILE_NAME


def load_credentials() -> dict[str, str]:
    """What `ajuste login` stored; empty when nothing (or nothing readable) is there."""
    try:
        stored = json.loads(credentials_path().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(stored, dict):
        return {}
    return {key: str(stored[key]) for key in ("url", "token") if stored.get(key)}


def save_credentials(*, url: str, token: str) -> Path:
    """Written owner-only from the first byte (never chmod-ed after being readable)."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump({"url": url, "token": token}, handle)
    path.chmod(0o600)  # a file an older version wrote may predate the mode
    return path


def stored_defaults(ctx: click.Context, url: str, token: str | None) -> tuple[str, str | None]:
    """The URL and token to use: an option or a variable first, else what login stored."""
    stored = load_credentials()
    source = ctx.get_parameter_source("url")
    if source is click.core.ParameterSource.DEFAULT and stored.get("url"):
        url = stored["url"]
    return url, token or stored.get("token")


def _whoami(url: str, token: str) -> dict[str, Any]:
    api = Api(url=url, token=token, transport=state().transport)
    try:
        return dict(api.get("me/"))
    except ApiError as error:
        if error.status == 401:
            raise click.ClickException(
                f"{url} refused this token (HTTP 401): copy it again from {settings_url(url)}"
            ) from None
        raise
    finally:
        api.close()


def settings_url(url: str) -> str:
    return url.rstrip("/") + "/settings/"


@click.command("login")
@click.option("--url", "login_url", default=None, help="The panel's address (asked if not given).")
@click.option(
    "--token-stdin", is_flag=True, help="Read the token from standard input (for scripts)."
)
def login(login_url: str | None, token_stdin: bool) -> None:
    """Store the panel's address and your API token for the next `ajuste` commands."""
    current = state()
    url = (login_url or click.prompt("Panel address", default=current.url)).strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise click.BadParameter(f"{url!r} is not an http:// or https:// address", param_hint="url")
    if token_stdin:
        token = sys.stdin.readline().strip()
    else:
        click.echo(f"Make a personal API token on {settings_url(url)} (API tokens), then paste it.")
        token = click.prompt("API token", hide_input=True).strip()
    if not token:
        raise click.UsageError(f"No token given: make one on {settings_url(url)}")
    me = _whoami(url, token)
    path = save_credentials(url=url, token=token)
    click.echo(f"Logged in to {url} as {me.get('username', '?')}; kept in {path} (mode 600).")
    if os.environ.get("AJUSTE_TOKEN") or os.environ.get("AJUSTE_URL"):
        click.echo("Note: AJUSTE_URL / AJUSTE_TOKEN are set in this shell and win over it.")
