"""`ajuste app create|list|show|url|start|stop|delete|logs`.

An app serves a model from a bucket behind an OpenAI-compatible URL:
`ajuste app create --model b@GRA/tiny-llama --adapter b@GRA/runs/1/adapter --flavor ai1-1-cpu`,
then `openai.OpenAI(base_url=$(ajuste app url 3f2a9c1e), api_key=$AJUSTE_TOKEN)`.
Scaling is fixed (`--replicas N`) or automatic (`--min`/`--max` with `--target-cpu` or
`--target-rps`); `--env`, `--volume` and `--label` are `ajuste notebook run`'s.
"""

from __future__ import annotations

import copy
from typing import Any

import click

from controlpanel.cli.client import Api, state
from controlpanel.cli.output import emit, output_option, wants_json
from controlpanel.cli.workloads import (
    emit_workload,
    env_option,
    flag_of,
    flavor_option,
    label_option,
    pairs,
    read_command,
    resolve_id,
    short,
    state_option,
    volume_option,
    workload_commands,
)

COLUMNS = [
    ("ID", "short_id"),
    ("NAME", "name"),
    ("STATE", "state"),
    ("MODEL", "model_name"),
    ("REPLICAS", "replicas_text"),
    ("FLAVOR", "flavor"),
    ("UNITS", "gpu"),
    ("ACCESS", "access"),
    ("OWNER", "owner"),
    ("CREATED", "created_at"),
]
# AppState.values (controlpanel/engine/models.py), repeated: the CLI imports no Django.
# tests/controlpanel/apps/test_cli_apps.py checks that the two lists agree.
APP_STATES = (
    "QUEUED",
    "INITIALIZING",
    "SCALING",
    "RUNNING",
    "STOPPING",
    "STOPPED",
    "FAILED",
    "ERROR",
    "DELETING",
)
# The `app create` flag each field of the API comes from, where it is not `--<field>`.
APP_FLAGS = {
    "gpu": "--units",
    "model_name": "--model-name",
    "probe_path": "--probe-path",
    "replicas": "--replicas",
    "min_replicas": "--min",
    "max_replicas": "--max",
    "target_cpu": "--target-cpu",
    "target_rps": "--target-rps",
    "scaling": "--min/--max",
}


def app_id(api: Api, ref: str) -> str:
    """A full app id, or a unique prefix of one (the short id the list shows)."""
    return resolve_id(api, "apps/", ref, noun="app")


def app_flag_of(key: str) -> str:
    """An error key of the API as the flag it came from (`min_replicas` → `--min`,
    `volumes.0` → `--volume 1`, `env.HF_TOKEN` → `--env HF_TOKEN`)."""
    if key in APP_FLAGS:
        return APP_FLAGS[key]
    return f"--{key}" if key in ("image", "model", "adapter") else flag_of(key)


def row(app: dict[str, Any]) -> dict[str, Any]:
    """The app with the columns the table shows."""
    replicas, config = app.get("replicas") or {}, app.get("config") or {}
    return short(app) | {
        "model_name": config.get("model_name"),
        "replicas_text": f"{replicas.get('ready', 0)}/{replicas.get('wanted', 0)}",
        "access": "public" if config.get("public") else "token",
    }


def show(app: dict[str, Any]) -> None:
    config = app.get("config") or {}
    scaling = config.get("scaling")
    if scaling == "fixed":
        scaling = f"fixed, {config.get('max_replicas')} replica(s)"
    elif scaling:
        target = config.get("target_cpu") if scaling == "cpu" else config.get("target_rps")
        unit = "% CPU" if scaling == "cpu" else " requests/s"
        scaling = (
            f"{config.get('min_replicas')} to {config.get('max_replicas')} replicas "
            f"at {target}{unit} each"
        )
    details = [
        ("reason", app.get("state_reason")),
        ("url", app.get("url")),
        ("model", config.get("model")),
        ("adapter", config.get("adapter")),
        ("scaling", scaling),
        ("cost", app.get("cost")),
    ]
    emit_workload(app, row(app), COLUMNS, details)


@click.group("app")
def app() -> None:
    """Apps of your project: a model behind an OpenAI-compatible URL."""


@app.command("create")
@click.option("--model", required=True, metavar="BUCKET@ALIAS/FOLDER", help="The model's folder.")
@click.option("--adapter", default=None, metavar="BUCKET@ALIAS/FOLDER", help="A LoRA adapter.")
@click.option("--name", default=None, help="Default: app.")
@click.option("--model-name", default=None, help="The model's id in the API (default: the name).")
@flavor_option
@click.option(
    "--units", "--gpu", "units", type=int, default=1, show_default=True, help="Units per replica."
)
@click.option("--replicas", type=int, default=None, help="Fixed replicas, 1 to 10 (default 1).")
@click.option("--min", "min_replicas", type=int, default=None, help="Autoscaled: fewest (0-10).")
@click.option("--max", "max_replicas", type=int, default=None, help="Autoscaled: most (1-10).")
@click.option("--target-cpu", type=int, default=None, help="Autoscale at this CPU % per replica.")
@click.option("--target-rps", type=int, default=None, help="Autoscale at requests/s per replica.")
@click.option("--public", is_flag=True, help="Anyone with the URL may call it (no token).")
@click.option("--image", default=None, help="The server's image (Kubernetes backend only).")
@volume_option("More data: bucket@ALIAS[/prefix]:/workspace/path:ro (repeatable).")
@env_option("Environment (repeatable); V = secret:NAME reads the project secret NAME.")
@click.option(
    "--secret", "secrets", multiple=True, metavar="K=NAME", help="Same as --env K=secret:NAME."
)
@label_option
@click.option("--probe-path", default=None, help="The path that answers once ready (/health).")
@click.option("--port", type=int, default=None, help="The server's port (8000).")
@output_option
def create(**options: Any) -> None:
    """Deploy a model (and an adapter) from a bucket.

    The app starts QUEUED; `ajuste app url` prints its OpenAI base URL."""
    show(state().api().post("apps/", create_body(options), name=app_flag_of))


def create_body(options: dict[str, Any]) -> dict[str, Any]:
    """The API's request for `app create`'s flags (usage errors for what cannot go together)."""
    env = pairs(options["env"], "--env")
    for key, name in pairs(options["secrets"], "--secret").items():
        if key in env:
            raise click.BadParameter(f"{key} is also given with --env", param_hint="--secret")
        env[key] = f"secret:{name}"
    body: dict[str, Any] = {
        "model": options["model"],
        "flavor": options["flavor"],
        "gpu": options["units"],
        "volumes": list(options["volumes"]),
        "env": env,
        "labels": pairs(options["labels"], "--label"),
        "public": options["public"],
    }
    for key in ("adapter", "name", "model_name", "image", "probe_path", "port"):
        if options[key] is not None:
            body[key] = options[key]
    return body | scaling_body(options)


def scaling_body(options: dict[str, Any]) -> dict[str, Any]:
    """`--replicas N` (fixed), or `--min`/`--max` with one target (autoscaled)."""
    cpu, rps = options["target_cpu"], options["target_rps"]
    bounds = {"min_replicas": options["min_replicas"], "max_replicas": options["max_replicas"]}
    autoscaled = cpu is not None or rps is not None or any(v is not None for v in bounds.values())
    if not autoscaled:
        return {"scaling": "fixed", "replicas": options["replicas"] or 1}
    if options["replicas"] is not None:
        raise click.UsageError("Give --replicas (fixed) or --min/--max (autoscaled), not both.")
    if cpu is not None and rps is not None:
        raise click.UsageError("Autoscale on one target: --target-cpu or --target-rps.")
    if cpu is None and rps is None:
        raise click.UsageError("Autoscaling needs a target: --target-cpu PCT or --target-rps N.")
    body = {k: v for k, v in bounds.items() if v is not None}
    if cpu is not None:
        return body | {"scaling": "cpu", "target_cpu": cpu}
    return body | {"scaling": "rps", "target_rps": rps}


APP_LOGS = """The server's log (the current run's).

    With --follow, the exit status is 3 when the run ends otherwise than STOPPED."""


@app.command("list")
@state_option(APP_STATES, "app")
@output_option
def list_apps(wanted_state: str | None) -> None:
    """Apps of the project, newest first."""
    rows = state().api().paginate("apps/")
    if wanted_state:
        rows = [a for a in rows if a["state"] == wanted_state.upper()]
    emit(rows if wants_json() else [row(a) for a in rows], COLUMNS)


show_app = workload_commands(
    app,
    "apps",
    app_id,
    show,
    get=("show", "One app: its URL, model, scaling, cost and state history."),
    logs=(APP_LOGS, "app", "STOPPED"),
    actions=[
        ("start", "start/", "Start a stopped app (a new run, the same URL).", "Starting {key}."),
        ("stop", "stop/", "Stop an app: its replicas go, its URL stays.", "Stopping {key}."),
        ("delete", "", "Delete an app and its URL (its billed runs stay).", "Deleting {key}."),
    ],
)


# `get`, as `ajuste job get` and `ajuste notebook get`: the same command, not listed twice.
app.add_command(copy.copy(show_app), "get")
app.commands["get"].hidden = True


def url_of(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    return {"id": body["id"], "url": body["url"]}, body["url"]


app.command("url", help="The app's OpenAI base URL (the same across stop and start).")(
    read_command("apps", app_id, "", url_of)
)
