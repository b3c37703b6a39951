"""`ajuste job run|list|get|logs|stop|delete|rerun|retry-push`.

`ajuste job run` takes the `ovhai job run` flags:
`ajuste job run --gpu 1 --flavor h100-1-gpu --volume b@GRA/data:/workspace/data:ro IMAGE -- CMD`.
"""

from __future__ import annotations

import json
from typing import Any

import click

from controlpanel.cli.client import Api, state
from controlpanel.cli.output import output_option
from controlpanel.cli.workloads import (
    add_list,
    emit_workload,
    flag_of,
    logs_help,
    pairs,
    resolve_id,
    run_body,
    run_options,
    short,
    workload_commands,
)

JOB_COLUMNS = [
    ("ID", "short_id"),
    ("NAME", "name"),
    ("STATE", "state"),
    ("FLAVOR", "flavor"),
    ("GPU", "gpu"),
    ("OWNER", "owner"),
    ("CREATED", "created_at"),
]
# JobState.values (controlpanel/jobs/states.py), repeated: the CLI imports no Django.
# tests/controlpanel/jobs/test_cli_jobs.py checks that the two lists agree.
JOB_STATES = (
    "QUEUED",
    "INITIALIZING",
    "PENDING",
    "RUNNING",
    "INTERRUPTING",
    "TIMEOUT",
    "FINALIZING",
    "DONE",
    "INTERRUPTED",
    "FAILED",
    "ERROR",
    "SYNC_FAILED",
)


def typed(value: str) -> Any:
    """A `--param` value: JSON when it parses (numbers, booleans), else the text itself."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def job_id(api: Api, ref: str) -> str:
    """A full job id, or a unique prefix of one (the short id the list shows)."""
    return resolve_id(api, "jobs/", ref, noun="job")


def show(job: dict[str, Any]) -> None:
    job = short(job)
    place = (job.get("queue_position") or {}).get("said")
    emit_workload(job, job, JOB_COLUMNS, [("reason", job.get("state_reason")), ("queue", place)])


@click.group("job")
def job() -> None:
    """Training jobs of your project."""


@job.command("run", context_settings={"ignore_unknown_options": False})
@run_options
@click.option("--timeout", type=int, default=None, help="Seconds (default 7 days).")
@click.option(
    "--nodes", type=int, default=None, help="Pods of --gpu units each, under torchrun (default 1)."
)
@click.option(
    "--preemptible/--no-preemptible",
    default=None,
    help="May borrow idle GPUs, be preempted and resume (Kueue only; on for a fine-tune).",
)
@click.option("--name", default=None)
@click.option(
    "--preset",
    type=click.Choice(["finetune"]),
    default=None,
    help="Run the built-in fine-tune image (then IMAGE and COMMAND are not given).",
)
@click.option("--param", "params", multiple=True, metavar="K=V", help="Preset parameter.")
@click.argument("image", required=False)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@output_option
def run(
    gpu: int,
    flavor: str,
    volumes: tuple[str, ...],
    env: tuple[str, ...],
    labels: tuple[str, ...],
    timeout: int | None,
    nodes: int | None,
    preemptible: bool | None,
    name: str | None,
    preset: str | None,
    params: tuple[str, ...],
    image: str | None,
    command: tuple[str, ...],
) -> None:
    """Submit a job: IMAGE [-- COMMAND...] (the command is never run through a shell)."""
    if not preset and not image:
        raise click.UsageError("Give an IMAGE (or --preset finetune).")
    body = run_body(gpu, flavor, volumes, env, labels, name)
    if timeout is not None:
        body["timeout"] = timeout
    if nodes is not None:
        body["nodes"] = nodes
    if preemptible is not None:
        body["preemptible"] = preemptible
    if preset:
        body |= {
            "preset": preset,
            "params": {k: typed(v) for k, v in pairs(params, "--param").items()},
        }
    else:
        body |= {"image": image, "command": list(command)}
    show(state().api().post("jobs/", body, name=flag_of))


add_list(job, "jobs", JOB_STATES, JOB_COLUMNS, "Jobs of the project, newest first.")
JOB_LOGS = logs_help(
    "The job's log (the whole archived log once it has ended).",
    "DONE",
    "FAILED, ERROR, INTERRUPTED, SYNC_FAILED",
)
ACTIONS = [
    ("stop", "stop/", "Stop a job (INTERRUPTING, then INTERRUPTED).", "Stopping {key}."),
    ("rerun", "rerun/", "Run a finished job again.", "Queued {key} again."),
    (
        "retry-push",
        "retry-push/",
        "Push the kept data again after SYNC_FAILED.",
        "Pushing {key} again.",
    ),
    ("delete", "", "Delete a finished job and its log.", "Deleted {key}."),
]
GET = ("get", "One job, with its state history.")
workload_commands(
    job, "jobs", job_id, show, get=GET, logs=(JOB_LOGS, "job", "DONE"), actions=ACTIONS
)
