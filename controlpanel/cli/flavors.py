"""`ajuste flavor list`: the machine flavors every kind runs on, and their prices."""

from __future__ import annotations

from typing import Any

import click

from controlpanel.cli.client import state
from controlpanel.cli.output import emit, output_option, wants_json

FLAVOR_COLUMNS = [
    ("NAME", "name"),
    ("GPU", "gpu"),
    ("VCPU", "vcpu_per_unit"),
    ("MEMORY GIB", "memory_gib_per_unit"),
    ("MAX UNITS", "max_units"),
    ("PRICE/H", "price_per_hour"),
    ("HERE", "here"),
]


@click.group("flavor")
def flavor() -> None:
    """Machine flavors and their prices."""


@flavor.command("list")
@output_option
def list_flavors() -> None:
    """Flavors you can run on: GPU model, vCPU, memory, price per unit-hour, and whether each
    can run where this panel runs workloads (HERE; the reason under the table when not)."""
    rows = state().api().get("flavors/")
    for row in rows:
        row["gpu"] = f"{row['gpus_per_unit']}x {row['gpu_model']}" if row["gpus_per_unit"] else "-"
    if wants_json():
        emit(rows)
        return
    for row in rows:
        row["here"] = "yes" if row.get("runs_here", True) else "no"
    emit(rows, FLAVOR_COLUMNS)
    for names, reason in cannot_run(rows):
        click.echo(f"{names} cannot run here: {reason}")


def cannot_run(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The flavors that cannot run here, those with the same reason together, in list order."""
    by_reason: dict[str, list[str]] = {}
    for row in rows:
        if row.get("runs_here") is False:
            by_reason.setdefault(row.get("why_not") or "", []).append(row["name"])
    return [(", ".join(names), reason) for reason, names in by_reason.items()]
