"""`-o json|table` for every command: JSON for scripts, aligned columns for people."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

from controlpanel.cli.client import State, state
from controlpanel.core.units import binary_size

FORMATS = ("table", "json")


def set_output(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        ctx.ensure_object(State).output = value
    return value


def output_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """`-o/--output` on a subcommand too (`ajuste bucket list -o json`)."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default=None,
        expose_value=False,
        callback=set_output,
        is_eager=True,
        help="Output format (default: table).",
    )(command)


def wants_json() -> bool:
    return state().output == "json"


def emit(data: Any, columns: Sequence[tuple[str, str]] = (), *, message: str = "") -> None:
    """Print `data` as JSON, or as a table of `columns` (header, key), or as `message`."""
    if wants_json():
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    elif columns:
        rows = data if isinstance(data, list) else [data]
        table(rows, columns)
    elif message:
        click.echo(message)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> None:
    cells = [[header for header, _ in columns]]
    cells += [[_text(row.get(key)) for _, key in columns] for row in rows]
    widths = [max(len(line[index]) for line in cells) for index in range(len(columns))]
    for line in cells:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )


def _text(value: Any) -> str:
    if value is None:
        return "-"
    # One line per row, whatever a key holds (newlines, tabs): a listing stays parseable.
    return str(value).replace("\n", "\\n").replace("\t", "\\t")


def human_size(size: int | None) -> str:
    """The size as the pages show it (binary units)."""
    return binary_size(size)
