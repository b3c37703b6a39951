"""`ajuste notebook run|list|get|start|stop|keep-alive|delete|logs|shares|share|unshare`.

`ajuste notebook run` takes `ajuste job run`'s flags where they mean the same (`--flavor`,
`--gpu`, `--volume`, `--env`, `--label`, `--name`), and `--image`, `--editor`:
`ajuste notebook run --image pytorch --flavor h100-1-gpu --volume b@GRA/data:/workspace/data`.
"""

from __future__ import annotations

from typing import Any

import click

from controlpanel.cli.client import Api, state
from controlpanel.cli.output import emit, output_option
from controlpanel.cli.workloads import (
    add_list,
    emit_workload,
    flag_of,
    logs_help,
    read_command,
    resolve_id,
    run_body,
    run_options,
    short,
    workload_commands,
)

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
# NotebookState.values (controlpanel/engine/models.py), repeated: the CLI imports no Django.
# tests/controlpanel/notebooks/test_cli_notebooks.py checks that the two lists agree.
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
    notebook = short(notebook)
    details = [
        ("reason", "state_reason"),
        ("url", "url"),
        ("open", "open_url"),
        ("idle stop at", "idle_deadline"),
        ("cost", "cost"),
    ]
    emit_workload(notebook, notebook, COLUMNS, [(lb, notebook.get(k)) for lb, k in details])


@click.group("notebook")
def notebook() -> None:
    """Notebooks (JupyterLab, VS Code) of your project."""


@notebook.command("run")
@click.option("--image", default=None, help="A notebook image's name (default: python).")
@click.option("--editor", type=click.Choice(EDITORS), default=None, help="Default: jupyterlab.")
@run_options
@click.option("--name", default=None)
@output_option
def run(image: str | None, editor: str | None, **shared: Any) -> None:
    """Create a notebook and start it (STARTING, then RUNNING at its url)."""
    body = run_body(**shared)  # run_options and --name
    body |= {"image": image or "", "editor": editor or ""}
    show(state().api().post("notebooks/", body, name=notebook_flag_of))


add_list(notebook, "notebooks", NOTEBOOK_STATES, COLUMNS, "Notebooks of the project, newest first.")
workload_commands(
    notebook,
    "notebooks",
    notebook_id,
    show,
    get=("get", "One notebook: its address, idle deadline, cost and state history."),
    logs=(
        logs_help("The editor's log (the current run's).", "STOPPED", "FAILED, ERROR"),
        "notebook",
        "STOPPED",
    ),
    actions=[
        (
            "start",
            "start/",
            "Start a stopped notebook (same address, same workspace).",
            "Starting {key}.",
        ),
        (
            "stop",
            "stop/",
            "Stop a notebook (rw volumes pushed, the workspace kept).",
            "Stopping {key}.",
        ),
        (
            "keep-alive",
            "keep-alive/",
            "Count as activity now (the idle stop waits again).",
            "Kept {key} running.",
        ),
        (
            "delete",
            "",
            "Delete a notebook and its workspace.",
            "Deleting {key}: its workspace goes with it.",
        ),
    ],
)


def shares_message(shares: dict[str, Any]) -> str:
    members = ", ".join(shares["members"]) or "none"
    project = (
        "Shared with the whole project" if shares["project"] else "Not shared with the project"
    )
    return f"{project}; members it is shared with: {members}."


notebook.command("shares", help="Who may open a notebook besides its owner.")(
    read_command(
        "notebooks", notebook_id, "shares/", lambda answer: (answer, shares_message(answer))
    )
)


def share_command(path: str, doc: str) -> Any:
    @click.argument("ref")
    @click.option("--member", default=None, help="A member of the project (a username).")
    @click.option("--project", "everyone", is_flag=True, help="Every member of the project.")
    @output_option
    def command(ref: str, member: str | None, everyone: bool) -> None:
        if (member is None) == (not everyone):
            raise click.UsageError("Give one of --member USERNAME or --project.")
        api = state().api()
        body: dict[str, Any] = {"member": member} if member is not None else {"project": True}
        answer = api.post(f"notebooks/{notebook_id(api, ref)}/{path}/", body, name=flag_of_share)
        emit(answer, message=shares_message(answer))

    command.__doc__ = doc
    return command


def flag_of_share(key: str) -> str:
    return "--project" if key == "project" else f"--{key}"


notebook.command("share")(
    share_command(
        "share", "Let a member (--member) or the project (--project) open it: its owner only."
    )
)
notebook.command("unshare")(
    share_command("unshare", "Take a member's (--member) or the project's (--project) share back.")
)
