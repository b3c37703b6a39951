"""What `ajuste job`, `ajuste notebook` and `ajuste app` share: ids by prefix, the `K=V` and
create flags, the `get`, `logs` and start/stop/delete commands, the way a workload is printed."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import click

from controlpanel.cli.client import Api, ApiError, state
from controlpanel.cli.follow import Unavailable, follow_stream
from controlpanel.cli.output import emit, output_option, wants_json
from controlpanel.cli.waiting import wait_to_start

FOLLOW_PERIOD_S = 1.0
EXIT_NOT_DONE = 3  # `logs --follow`: the run ended, but not as it should (1 and 2 are click's)
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def options(*decorators: Decorator) -> Decorator:
    """Several click decorators as one, applied in the order written (so `--help` lists them
    in that order)."""

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


def volume_option(
    help: str = "bucket@ALIAS[/prefix]:/workspace/path[:ro|rw|rwd] (repeatable).",
) -> Decorator:
    return click.option("--volume", "volumes", multiple=True, metavar="SPEC", help=help)


def env_option(help: str = "Environment (repeatable).") -> Decorator:
    return click.option("--env", "env", multiple=True, metavar="K=V", help=help)


flavor_option = click.option(
    "--flavor", envvar="AJUSTE_FLAVOR", default="ai1-1-cpu", show_default=True
)
label_option = click.option(
    "--label", "labels", multiple=True, metavar="K=V", help="Label (repeatable)."
)
# `ajuste job run`'s and `ajuste notebook run`'s flags for the machine and what it is given.
run_options = options(
    click.option(
        "--gpu", "gpu", type=int, default=1, show_default=True, help="Units of the flavor."
    ),
    flavor_option,
    volume_option(),
    env_option(),
    label_option,
)


def list_options(states: tuple[str, ...], noun: str) -> Decorator:
    """`--state` (any case), `--label K[=V]`, `--owner` and `-o` of `ajuste job|notebook list`."""
    return options(
        state_option(states, noun),
        click.option("--label", default=None, metavar="K[=V]"),
        click.option("--owner", default=None),
        output_option,
    )


def state_option(states: tuple[str, ...], noun: str) -> Decorator:
    return click.option(
        "--state",
        "wanted_state",
        type=click.Choice(states, case_sensitive=False),
        default=None,
        help=f"Only {noun}s in this state (any case).",
    )


def run_body(
    gpu: int,
    flavor: str,
    volumes: tuple[str, ...],
    env: tuple[str, ...],
    labels: tuple[str, ...],
    name: str | None,
) -> dict[str, Any]:
    """The API's request for `run_options` and `--name`."""
    return {
        "flavor": flavor,
        "gpu": gpu,
        "volumes": list(volumes),
        "env": pairs(env, "--env"),
        "labels": pairs(labels, "--label"),
        "name": name or "",
    }


def pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    """`K=V` flags into a dict; anything else is a usage error naming the flag."""
    found: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint=flag)
        found[key] = rest
    return found


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


def short(body: dict[str, Any]) -> dict[str, Any]:
    """The workload with the short id the tables show."""
    return body | {"short_id": body["id"][:8]}


def emit_workload(
    body: dict[str, Any],
    row: dict[str, Any],
    columns: list[tuple[str, str]],
    details: list[tuple[str, Any]],
) -> None:
    """`body` with `-o json`; else `row` as a table, then each of `details` that has a value."""
    if wants_json():
        emit(body)
        return
    emit(row, columns)
    for label, value in details:
        if value:
            click.echo(f"{label}: {value}")


def get_command(
    collection: str, resolve: Callable[[Api, str], str], show: Callable[[dict[str, Any]], None]
) -> Callable[[str], None]:
    """A `<kind> get REF` command: the workload, then its state history."""

    @click.argument("ref")
    @output_option
    def command(ref: str) -> None:
        api = state().api()
        body = api.get(f"{collection}/{resolve(api, ref)}/")
        show(body)
        if not wants_json():
            for event in body.get("history", []):
                click.echo(f"  {event['at']}  {event['state']:<12} {event['reason']}")

    return command


def logs_command(
    collection: str, resolve: Callable[[Api, str], str], noun: str, ended_well: str
) -> Callable[..., None]:
    """A `<kind> logs REF [-f] [--after N]` command; with --follow it exits EXIT_NOT_DONE when
    the run ends otherwise than `ended_well`."""

    @click.argument("ref")
    @click.option(
        "-f",
        "--follow",
        is_flag=True,
        help="Keep printing new lines until the run ends, then its final state on stderr; "
        "while it waits to start, its state and place in the queue on stderr.",
    )
    @click.option("--after", type=int, default=0, help="Start after this line number.")
    @output_option
    def command(ref: str, follow: bool, after: int) -> None:
        api = state().api()
        base = f"{collection}/{resolve(api, ref)}/"
        if follow:
            try:
                wait_to_start(api, base)  # its state and place, not silence, until it starts
            except KeyboardInterrupt:
                raise SystemExit(130) from None
        page = print_log(api, base, after=after, follow=follow)
        if follow:
            ended, summary = run_outcome(api.get(base), page["run"], noun)
            click.echo(summary, err=True)
            if ended != ended_well:
                raise SystemExit(EXIT_NOT_DONE)

    return command


def logs_help(summary: str, ended_well: str, otherwise: str) -> str:
    """The help of a `logs` command whose exit status, with --follow, says how the run ended."""
    return f"""{summary}

    With `-o json`, one `{{"seq": N, "text": "..."}}` object per line, as the lines come.

    \b
    With --follow, the exit status says how the run ended:
      0    {ended_well}
      3    it ended otherwise ({otherwise})
      1    an API or network error; 2 a usage error; 130 interrupted (Ctrl-C)"""


def print_log(api: Api, base: str, *, after: int, follow: bool) -> dict[str, Any]:
    """Print the log of the workload at `base` (`jobs/<id>/`) from line `after`, until its run
    ends with `follow`, else until no line is left; the last page read (its `run`). With
    `follow`, over the live stream the logs name (controlpanel/cli/follow.py), else by polling."""

    def echo(line: dict[str, Any]) -> None:
        click.echo(log_line(line))

    streams = follow
    try:
        while True:
            page: dict[str, Any] = api.get(f"{base}logs/", after=after, limit=5000)
            for line in page["lines"]:
                echo(line)
            after = page["next"]
            if page["eof"] or (not follow and not page["lines"]):
                return page
            stream = api.links.get("stream") if streams else None
            if stream and not page["lines"]:  # caught up: the rest as it comes
                try:
                    return follow_stream(api, stream, after=after, echo=echo)
                except Unavailable as gone:  # poll from the last line printed
                    after, streams = gone.args[0], False
            elif not page["lines"]:
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


def action_command(
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


def add_actions(
    group: click.Group,
    collection: str,
    resolve: Callable[[Api, str], str],
    show: Callable[[dict[str, Any]], None],
    actions: list[tuple[str, str, str, str]],
) -> None:
    """A kind's commands on one workload (start, stop, delete...): each `(command, path, help,
    message)` POSTs to `<collection>/<id>/<path>` (DELETEs the workload when `path` is "")."""
    for name, path, help_text, message in actions:
        command = action_command(collection, resolve, show, path, message)
        group.command(name, help=help_text)(command)


def workload_commands(
    group: click.Group,
    collection: str,
    resolve: Callable[[Api, str], str],
    show: Callable[[dict[str, Any]], None],
    *,
    get: tuple[str, str],
    logs: tuple[str, str, str],
    actions: list[tuple[str, str, str, str]],
) -> click.Command:
    """A kind's commands on one workload, from its declarations: `get` (its name and help),
    `logs` (help, the kind's noun, the state a run ends well in) and its actions; returns the
    get command."""
    name, get_help = get
    command = group.command(name, help=get_help)(get_command(collection, resolve, show))
    logs_text, noun, ended_well = logs
    group.command("logs", help=logs_text)(logs_command(collection, resolve, noun, ended_well))
    add_actions(group, collection, resolve, show, actions)
    return command


def add_list(
    group: click.Group, collection: str, states: tuple[str, ...], columns: list[Any], doc: str
) -> None:
    """`<kind> list`, filtered by state, label and owner on the panel's side."""

    @group.command("list", help=doc)
    @list_options(states, group.name or "")
    def command(wanted_state: str | None, label: str | None, owner: str | None) -> None:
        api = state().api()
        rows = api.paginate(f"{collection}/", state=wanted_state, label=label, owner=owner)
        emit([short(r) for r in rows], columns)


def read_command(
    collection: str,
    resolve: Callable[[Api, str], str],
    path: str,
    answer: Callable[[dict[str, Any]], tuple[Any, str]],
) -> Callable[[str], None]:
    """A `<kind> <what> REF` command that reads `<collection>/<id>/<path>` and emits what
    `answer` makes of it (the data, the sentence)."""

    @click.argument("ref")
    @output_option
    def command(ref: str) -> None:
        api = state().api()
        data, message = answer(api.get(f"{collection}/{resolve(api, ref)}/{path}"))
        emit(data, message=message)

    return command


# The flag or argument each submission field comes from (engine/contract.py's keys): `job
# run`'s, which the other kinds' commands share where they mean the same.
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
