"""`ajuste sweep run|list|get|stop`: sweeps of a fine-tune over a search space.

    ajuste sweep run --name lr-rank --volume b@GRA/chat:/workspace/data \\
        --volume b@GRA/runs/lr:/workspace/output:rw --param base_model=org/model \\
        --space learning_rate=1e-5,1e-4,1e-3 --space rank=8,16 \\
        --sampler grid --pruner median --trials 6 --parallel 2 --max-cost 5
"""

from __future__ import annotations

import json
from typing import Any

import click

from controlpanel.cli.client import state
from controlpanel.cli.output import emit, output_option
from controlpanel.cli.workloads import resolve_id, run_body, run_options


def typed(value: str) -> Any:
    """A value: JSON when it parses (numbers, booleans), else the text itself."""
    try:
        return json.loads(value)
    except ValueError:
        return value


SWEEP_COLUMNS = [
    ("ID", "short_id"),
    ("NAME", "name"),
    ("STATE", "state"),
    ("TRIALS", "trials_done"),
    ("BEST LOSS", "best_loss"),
    ("COST", "cost"),
]
TRIAL_COLUMNS = [
    ("#", "number"),
    ("JOB", "job_short"),
    ("STATE", "state"),
    ("FINAL LOSS", "final_loss"),
    ("COST", "cost"),
    ("PARAMS", "params_text"),
    ("WHY", "reason"),
]


def parse_space(items: tuple[str, ...]) -> dict[str, Any]:
    """`--space lr=1e-5,1e-4` (values) or `--space lr=1e-5..1e-3:log` (a range)."""
    space: dict[str, Any] = {}
    for item in items:
        name, sep, rest = item.partition("=")
        if not sep or not name or not rest:
            raise click.BadParameter(f"{item!r}: write NAME=V1,V2 or NAME=LOW..HIGH[:log]")
        if ".." in rest:
            bounds, _, flag = rest.partition(":")
            low, _, high = bounds.partition("..")
            space[name] = {"low": typed(low), "high": typed(high), "log": flag == "log"}
        else:
            space[name] = {"values": [typed(v) for v in rest.split(",")]}
    return space


def summarized(sweep: dict[str, Any]) -> dict[str, Any]:
    trials = sweep.get("trials") or []
    ended = sum(1 for t in trials if t["state"] != "RUNNING")
    best = sweep.get("best") or {}
    return sweep | {
        "short_id": sweep["id"][:8],
        "trials_done": f"{ended}/{sweep['max_trials']}",
        "best_loss": best.get("final_loss"),
    }


def show(sweep: dict[str, Any]) -> None:
    emit(summarized(sweep), SWEEP_COLUMNS)
    if state().output != "json":
        rows = [
            t
            | {
                "job_short": (t.get("job") or "")[:8],
                "params_text": " ".join(f"{k}={v}" for k, v in t["params"].items()),
            }
            for t in sweep.get("trials") or []
        ]
        if rows:
            click.echo("")
            emit(rows, TRIAL_COLUMNS)
        if sweep.get("state_reason"):
            click.echo(f"\n{sweep['state_reason']}")


@click.group("sweep")
def sweep() -> None:
    """Sweeps: a fine-tune tried over a search space, poor trials stopped early."""


@sweep.command("run")
@run_options
@click.option("--name", required=True)
@click.option("--param", "params", multiple=True, metavar="K=V", help="Fixed preset parameter.")
@click.option("--space", "space", multiple=True, required=True, metavar="K=V1,V2|K=LOW..HIGH[:log]")
@click.option("--sampler", type=click.Choice(["grid", "random", "tpe"]), default="tpe")
@click.option(
    "--pruner", type=click.Choice(["none", "median", "successive_halving"]), default="none"
)
@click.option("--trials", "max_trials", type=int, required=True, help="Trials in all.")
@click.option("--parallel", type=int, default=1, show_default=True, help="Trials at once.")
@click.option("--max-cost", default=None, help="Stop launching once the trials cost this.")
@click.option("--seed", type=int, default=None)
@output_option
def run(
    gpu: int,
    flavor: str,
    volumes: tuple[str, ...],
    env: tuple[str, ...],
    labels: tuple[str, ...],
    name: str,
    params: tuple[str, ...],
    space: tuple[str, ...],
    sampler: str,
    pruner: str,
    max_trials: int,
    parallel: int,
    max_cost: str | None,
    seed: int | None,
) -> None:
    """Start a sweep of the fine-tune preset."""
    base = run_body(gpu, flavor, volumes, env, labels, name) | {"preset": "finetune"}
    fixed: dict[str, Any] = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: write K=V", param_hint="--param")
        fixed[key] = typed(value)
    base["params"] = fixed
    body: dict[str, Any] = {
        "name": name,
        "base": base,
        "space": parse_space(space),
        "sampler": sampler,
        "pruner": "" if pruner == "none" else pruner,
        "max_trials": max_trials,
        "parallel": parallel,
    }
    if max_cost is not None:
        body["max_cost"] = max_cost
    if seed is not None:
        body["seed"] = seed
    show(state().api().post("sweeps/", body))


@sweep.command("list")
@output_option
def list_sweeps() -> None:
    """Sweeps of the project, newest first."""
    emit([summarized(s) for s in state().api().paginate("sweeps/")], SWEEP_COLUMNS)


def sweep_id(ref: str) -> str:
    return resolve_id(state().api(), "sweeps/", ref, noun="sweep")


@sweep.command("get")
@click.argument("ref")
@output_option
def get(ref: str) -> None:
    """One sweep with its trials (a full id or the short one `list` shows)."""
    show(state().api().get(f"sweeps/{sweep_id(ref)}/"))


@sweep.command("stop")
@click.argument("ref")
@output_option
def stop(ref: str) -> None:
    """Stop launching trials and stop the running ones."""
    show(state().api().post(f"sweeps/{sweep_id(ref)}/stop/", {}))
