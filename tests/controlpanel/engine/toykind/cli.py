"""`ajuste batch`: the toy kind's command group (controlpanel/cli/main.py adds it)."""

from __future__ import annotations

import click

from controlpanel.cli.client import state


@click.group("batch")
def batch() -> None:
    """Batch inference runs."""


@batch.command("list")
def batch_list() -> None:
    """The project's batches."""
    for row in state().api().get("batches/")["results"]:
        click.echo(f"{row['name']} {row['state']}")
