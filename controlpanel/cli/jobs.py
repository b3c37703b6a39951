"""`ajuste job run|list|get|logs|stop|delete|rerun|retry-push` and `ajuste flavor list`.

`ajuste job run` takes the `ovhai job run` flags:
`ajuste job run --gpu 1 --flavor h100-1-gpu --volume b@GRA/data:/workspace/data:ro IMAGE -- CMD`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import click

from controlpanel.cli.client import Api, ApiError, state
from controlpanel.cli.output import emit, output_option, wants_json

JOB_COLUMNS = [
    ("ID", "short_id"),
    ("NAME", "name"),
    ("STATE", "state"),
    ("FLAVOR", "flavor"),
    ("GPU", "gpu"),
    ("OWNER", "owner"),
    ("CREATED", "created_at"),
]
FLAVOR_COLUMNS = [
    ("NAME", "name"),
    ("GPU", "gpu"),
    ("VCPU", "vcpu_per_unit"),
    ("MEMORY GIB", "memory_gib_per_unit"),
    ("MAX UNITS", "max_units"),
    ("PRICE/H", "price_per_hour"),
]
FOLLOW_PERIOD_S = 1.0
EXIT_NOT_DONE = 3  # `job logs --follow`: the run ended, but not DONE (1 and 2 are click's)
# JobState.values (controlpanel/workloads/models.py), repeated: the CLI imports no Django.
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


def pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    """`K=V` flags into a dict; anything else is a usage error naming the flag."""
    found: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint=flag)
        found[key] = rest
    return found


def typed(value: str) -> Any:
    """A `--param` value: JSON when it parses (numbers, booleans), else the text itself."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def job_id(api: Api, ref: str) -> str:
    """A full job id, or a unique prefix of one (the short id the list shows)."""
    return resolve_id(api, "jobs/", ref, noun="job")


def resolve_id(api: Api, collection: str, ref: str, *, noun: str) -> str:
    """A full id, or the one id of `collection` that starts with `ref`."""
    try:
        return str(uuid.UUID(ref))
    except ValueError:
        pass
    matches = [j["id"] for j in api.paginate(collection) if j["id"].startswith(ref.lower())]
    if len(matches) != 1:
        raise ApiError(404, f"no {noun} {ref!r}" if not matches else f"{ref!r} is ambiguous")
    return matches[0]


def show(job: dict[str, Any]) -> None:
    job = job | {"short_id": job["id"][:8]}
    if wants_json():
        emit(job)
        return
    emit(job, JOB_COLUMNS)
    if job.get("state_reason"):
        click.echo(f"reason: {job['state_reason']}")


@click.group("job")
def job() -> None:
    """Training jobs of your project."""


@job.command("run", context_settings={"ignore_unknown_options": False})
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
@click.option("--timeout", type=int, default=None, help="Seconds (default 7 days).")
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
    name: str | None,
    preset: str | None,
    params: tuple[str, ...],
    image: str | None,
    command: tuple[str, ...],
) -> None:
    """Submit a job: IMAGE [-- COMMAND...] (the command is never run through a shell)."""
    if not preset and not image:
        raise click.UsageError("Give an IMAGE (or --preset finetune).")
    body: dict[str, Any] = {
        "flavor": flavor,
        "gpu": gpu,
        "volumes": list(volumes),
        "env": pairs(env, "--env"),
        "labels": pairs(labels, "--label"),
        "name": name or "",
    }
    if timeout is not None:
        body["timeout"] = timeout
    if preset:
        body |= {
            "preset": preset,
            "params": {k: typed(v) for k, v in pairs(params, "--param").items()},
        }
    else:
        body |= {"image": image, "command": list(command)}
    show(state().api().post("jobs/", body, name=flag_of))


# The `job run` flag or argument each submission field comes from (contract.py's keys).
FLAGS = {"volumes": "--volume", "env": "--env", "labels": "--label", "params": "--param"}
NUMBERED = {"volumes": "--volume", "command": "COMMAND argument"}


def flag_of(key: str) -> str:
    """An error key of the API as the user typed it: `volumes.0` → `--volume 1`,
    `env.HF_TOKEN` → `--env HF_TOKEN`, `gpu` → `--gpu`, `image` → `IMAGE`."""
    field, _, part = key.partition(".")
    if part.isdigit() and field in NUMBERED:
        return f"{NUMBERED[field]} {int(part) + 1}"
    if part:
        return f"{FLAGS.get(field, field)} {part}"
    return field.upper() if field in ("image", "command") else f"--{field}"


@job.command("list")
@click.option(
    "--state",
    "job_state",
    type=click.Choice(JOB_STATES, case_sensitive=False),
    default=None,
    help="Only jobs in this state (any case).",
)
@click.option("--label", default=None, metavar="K[=V]")
@click.option("--owner", default=None)
@output_option
def list_jobs(job_state: str | None, label: str | None, owner: str | None) -> None:
    """Jobs of the project, newest first."""
    jobs = state().api().paginate("jobs/", state=job_state, label=label, owner=owner)
    rows = [j | {"short_id": j["id"][:8]} for j in jobs]
    emit(rows, JOB_COLUMNS)


@job.command("get")
@click.argument("ref")
@output_option
def get(ref: str) -> None:
    """One job, with its state history."""
    api = state().api()
    body = api.get(f"jobs/{job_id(api, ref)}/")
    show(body)
    if not wants_json():
        for event in body.get("history", []):
            click.echo(f"  {event['at']}  {event['state']:<12} {event['reason']}")


@job.command("logs")
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
    """The job's log (the whole archived log once it has ended).

    With `-o json`, one `{"seq": N, "text": "..."}` object per line, as the lines come.

    \b
    With --follow, the exit status says how the run ended:
      0    DONE
      3    it ended otherwise (FAILED, ERROR, INTERRUPTED, SYNC_FAILED)
      1    an API or network error; 2 a usage error; 130 interrupted (Ctrl-C)"""
    api = state().api()
    key = job_id(api, ref)
    page = print_log(api, f"jobs/{key}/", after=after, follow=follow)
    if follow:
        ended, summary = run_outcome(api.get(f"jobs/{key}/"), page["run"])
        click.echo(summary, err=True)
        if ended != "DONE":
            raise SystemExit(EXIT_NOT_DONE)


def print_log(api: Api, base: str, *, after: int, follow: bool) -> dict[str, Any]:
    """Print the log of the workload at `base` (`jobs/<id>/`) from line `after`, until its run
    ends with `follow`, else until no line is left; the last page read."""
    try:
        while True:
            page: dict[str, Any] = api.get(f"{base}logs/", after=after, limit=5000)
            for line in page["lines"]:
                click.echo(log_line(line))
            after = page["next"]
            if page["eof"] or (not follow and not page["lines"]):
                return page
            if not page["lines"]:
                time.sleep(FOLLOW_PERIOD_S)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def run_outcome(job: dict[str, Any], run: int, noun: str = "job") -> tuple[str, str]:
    """The final state of `run` and a line that says it: `job 1a2b3c4d run 1 ended: FAILED
    (exit code 2): the reason`. An earlier run's outcome is read from the job's history."""
    if run == job["run"]:
        ended, exit_code, reason = job["state"], job.get("exit_code"), job.get("state_reason")
    else:
        events = [e for e in job.get("history", []) if e["run"] == run]
        last = events[-1] if events else {"state": "unknown", "reason": ""}
        ended, exit_code, reason = last["state"], None, last["reason"]
    summary = f"{noun} {job['id'][:8]} run {run} ended: {ended}"
    if exit_code is not None:
        summary += f" (exit code {exit_code})"
    return ended, summary + (f": {reason}" if reason else "")


def log_line(line: dict[str, Any]) -> str:
    """A log line as printed: its text, or one JSON object per line with `-o json`."""
    if wants_json():
        return json.dumps({"seq": line["seq"], "text": line["text"]}, ensure_ascii=False)
    return str(line["text"])


def _action(path: str, message: str) -> Any:
    @click.argument("ref")
    @output_option
    def command(ref: str) -> None:
        api = state().api()
        key = job_id(api, ref)
        body = api.call("DELETE" if path == "" else "POST", f"jobs/{key}/{path}")
        if body:
            show(body)
        else:
            emit({"id": key, "deleted": True}, message=message.format(key=key[:8]))

    return command


job.command("stop", help="Stop a job (INTERRUPTING, then INTERRUPTED).")(
    _action("stop/", "Stopping {key}.")
)
job.command("rerun", help="Run a finished job again.")(_action("rerun/", "Queued {key} again."))
job.command("retry-push", help="Push the kept data again after SYNC_FAILED.")(
    _action("retry-push/", "Pushing {key} again.")
)
job.command("delete", help="Delete a finished job and its log.")(_action("", "Deleted {key}."))


@click.group("flavor")
def flavor() -> None:
    """Machine flavors and their prices."""


@flavor.command("list")
@output_option
def list_flavors() -> None:
    """Flavors you can run on: GPU model, vCPU, memory, price per unit-hour."""
    rows = state().api().get("flavors/")
    for row in rows:
        row["gpu"] = f"{row['gpus_per_unit']}x {row['gpu_model']}" if row["gpus_per_unit"] else "-"
    emit(rows, FLAVOR_COLUMNS)


def follow_served_log(api: Api, base: str, *, after: int, follow: bool, noun: str) -> None:
    """A notebook's or an app's log (`base`: its API path); with `follow`, exit EXIT_NOT_DONE
    when the run ends otherwise than STOPPED."""
    page = print_log(api, base, after=after, follow=follow)
    if follow:
        ended, summary = run_outcome(api.get(base), page["run"], noun)
        click.echo(summary, err=True)
        if ended != "STOPPED":
            raise SystemExit(EXIT_NOT_DONE)


def workload_action(
    collection: str,
    resolve: Callable[[Api, str], str],
    show: Callable[[dict[str, Any]], None],
    path: str,
    message: str,
) -> Callable[[str], None]:
    """A `<kind> start|stop|delete REF` command: POST `<collection>/<id>/<path>` (DELETE when
    `path` is empty), then the workload as it now is, or `message` when it is gone."""

    @click.argument("ref")
    @output_option
    def command(ref: str) -> None:
        api = state().api()
        key = resolve(api, ref)
        body = api.call("DELETE" if path == "" else "POST", f"{collection}/{key}/{path}")
        if body:
            show(body)
        else:
            emit({"id": key, "deleted": True}, message=message.format(key=key[:8]))

    return command
