"""The `ajuste` command: the root group, its global options, and the command groups.

To add a group (`ajuste bucket ...`): write `controlpanel/cli/buckets.py` with a
`@click.group("bucket")` whose commands call `state().api()` (client.py) and print with
`emit()` (output.py, with `@output_option` on each command), then add it to GROUPS below.
A workload kind's group is its package's `cli.py` (a group named as the kind, `job`): the
kinds of controlpanel/kinds.py are added in its order, after the buckets'.
"""

from __future__ import annotations

import sys
from importlib import import_module

import click

from controlpanel.cli import buckets, capacity, flavors, login, sweeps, usage
from controlpanel.cli.client import DEFAULT_URL, State
from controlpanel.cli.output import FORMATS
from controlpanel.kinds import KINDS

GROUPS: list[click.Command] = [
    buckets.bucket,
    *(getattr(import_module(f"{package}.cli"), name) for name, package in KINDS.items()),
    sweeps.sweep,
    flavors.flavor,
    usage.usage,
    capacity.capacity,
    login.login,
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="AJUSTE_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="The panel's address (AJUSTE_URL).",
)
@click.option(
    "--token", envvar="AJUSTE_TOKEN", default=None, help="A personal API token (AJUSTE_TOKEN)."
)
@click.option(
    "-p",
    "--project",
    envvar="AJUSTE_PROJECT",
    default=None,
    help="Project slug (AJUSTE_PROJECT); needed if you are in several.",
)
@click.option("-o", "--output", type=click.Choice(FORMATS), default="table", help="Output format.")
@click.version_option(package_name="ajuste", prog_name="ajuste")
@click.pass_context
def cli(ctx: click.Context, url: str, token: str | None, project: str | None, output: str) -> None:
    """Ajuste: GPU notebooks, training jobs and object storage from the command line."""
    current = ctx.ensure_object(State)
    url, token = login.stored_defaults(ctx, url, token)  # what `ajuste login` kept, if unset
    current.url, current.token, current.project, current.output = url, token, project, output
    ctx.call_on_close(lambda: current._api.close() if current._api else None)


for group in GROUPS:
    cli.add_command(group)


def main() -> None:
    """Console-script entry point."""
    sys.exit(cli.main(prog_name="ajuste"))


if __name__ == "__main__":
    main()
