"""`ajuste notebook run|list|get|start|stop|keep-alive|delete|logs`.

`ajuste notebook run` takes `ajuste job run`'s flags where they mean the same (`--flavor`,
`--gpu`, `--volume`, `--env`, `--label`, `--name`), and `--image`, `--editor`:
`ajuste notebook run --image pytorch --flavor h100-1-gpu --volume b@GRA/data:/workspace/data`.
"""

from __future__ import annotations

from typing import Any

import click

from controlpanel.cli.client import Api, state
from controlpanel.cli.jobs import (
    flag_of,
    follow_served_log,
    pairs,
    resolve_id,
    workload_action,
)
from controlpanel.cli.output import emit, output_option, wants_json

COLUMNS = [
    ("ID", "short_id"),
    ("NAME", "name"),
    ("STATE", "state"),
    ("IMAGE", "image"),
    ("EDITOR", "editor"),
    ("FLAVOR", "flavor"),
    ("GPU", "gpu"),
    ("OWNER", "owner"),
    ("CREATED", "created_at"),
]
# NotebookState.values (controlpanel/workloads/models.py), repeated: the CLI imports no Django.
# tests/controlpanel/jobs/test_cli_notebooks.py checks that the two lists agree.
NOTEBOOK_STATES = ("STARTING", "RUNNING", "STOPPING", "STOPPED", "FAILED", "ERROR", "DELETING")
EDITORS = ("jupyterlab", "vscode")


def notebook_id(api: Api, ref: str) -> str:
    """A full notebook id, or a unique prefix of one (the short id the list shows)."""
    return resolve_id(api, "notebooks/", ref, noun="notebook")


def notebook_flag_of(key: str) -> str:
    """An error key of the API as the flag it came from (`volumes.0` → `--volume 1`,
    `image` → `--image`)."""
    return f"--{key}" if key in ("image", "editor") else flag_of(key)


def show(notebook: dict[str, Any]) -> None:
    notebook = notebook | {"short_id": notebook["id"][:8]}
    if wants_json():
        emit(notebook)
        return
    emit(notebook, COLUMNS)
    for label, key in [
        ("reason", "state_reason"),
        ("url", "url"),
        ("open", "open_url"),
        ("idle stop at", "idle_deadline"),
        ("cost", "cost"),
    ]:
        if notebook.get(key):
            click.echo(f"{label}: {notebook[key]}")


@click.group("notebook")
def notebook() -> None:
    """Notebooks (JupyterLab, VS Code) of your project."""


@notebook.command("run")
@click.option("--image", default=None, help="A notebook image's name (default: python).")
@click.option("--editor", type=click.Choice(EDITORS), default=None, help="Default: jupyterlab.")
@click.option("--gpu", "gpu", type=int, default=1, show_default=True, help="Units of the flavor.")
@click.option("--flavor", envvar="AJUSTE_FLAVOR", default="ai1-1-cpu", show_default=True)
@click.option(
    "--volume",
    "volumes",
    multiple=True,
    metavar="SPEC",
    help="bucket@ALIAS[/prefix]:/workspace/path[:ro|rw|rwd] (repeatable).",
)
@click.option("--env", "env", multiple=True, metavar="K=V", help="Environment (repeatable).")
@click.option("--label", "labels", multiple=True, metavar="K=V", help="Label (repeatable).")
@click.option("--name", default=None)
@output_option
def run(
    image: str | None,
    editor: str | None,
    gpu: int,
    flavor: str,
    volumes: tuple[str, ...],
    env: tuple[str, ...],
    labels: tuple[str, ...],
    name: str | None,
) -> None:
    """Create a notebook and start it (STARTING, then RUNNING at its url)."""
    body: dict[str, Any] = {
        "flavor": flavor,
        "gpu": gpu,
        "volumes": list(volumes),
        "env": pairs(env, "--env"),
        "labels": pairs(labels, "--label"),
        "name": name or "",
        "image": image or "",
        "editor": editor or "",
    }
    show(state().api().post("notebooks/", body, name=notebook_flag_of))


@notebook.command("list")
@click.option(
    "--state",
    "notebook_state",
    type=click.Choice(NOTEBOOK_STATES, case_sensitive=False),
    default=None,
    help="Only notebooks in this state (any case).",
)
@click.option("--label", default=None, metavar="K[=V]")
@click.option("--owner", default=None)
@output_option
def list_notebooks(notebook_state: str | None, label: str | None, owner: str | None) -> None:
    """Notebooks of the project, newest first."""
    rows = state().api().paginate("notebooks/", state=notebook_state, label=label, owner=owner)
    emit([n | {"short_id": n["id"][:8]} for n in rows], COLUMNS)


@notebook.command("get")
@click.argument("ref")
@output_option
def get(ref: str) -> None:
    """One notebook: its address, idle deadline, cost and state history."""
    api = state().api()
    body = api.get(f"notebooks/{notebook_id(api, ref)}/")
    show(body)
    if not wants_json():
        for event in body.get("history", []):
            click.echo(f"  {event['at']}  {event['state']:<12} {event['reason']}")


@notebook.command("logs")
@click.argument("ref")
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep printing new lines until the run ends, then its final state on stderr.",
)
@click.option("--after", type=int, default=0, help="Start after this line number.")
@output_option
def logs(ref: str, follow: bool, after: int) -> None:
    """The editor's log (the current run's).

    With `-o json`, one `{"seq": N, "text": "..."}` object per line, as the lines come.

    \b
    With --follow, the exit status says how the run ended:
      0    STOPPED
      3    it ended otherwise (FAILED, ERROR)
      1    an API or network error; 2 a usage error; 130 interrupted (Ctrl-C)"""
    api = state().api()
    follow_served_log(
        api, f"notebooks/{notebook_id(api, ref)}/", after=after, follow=follow, noun="notebook"
    )


def _action(path: str, message: str) -> Any:
    return workload_action("notebooks", notebook_id, show, path, message)


notebook.command("start", help="Start a stopped notebook (same address, same workspace).")(
    _action("start/", "Starting {key}.")
)
notebook.command("stop", help="Stop a notebook (rw volumes pushed, the workspace kept).")(
    _action("stop/", "Stopping {key}.")
)
notebook.command("keep-alive", help="Count as activity now (the idle stop waits again).")(
    _action("keep-alive/", "Kept {key} running.")
)
notebook.command("delete", help="Delete a notebook and its workspace.")(
    _action("", "Deleting {key}: its workspace goes with it.")
)
