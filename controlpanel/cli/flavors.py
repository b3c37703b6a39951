"""`ajuste flavor list`: the machine flavors every kind runs on, and their prices."""

from __future__ import annotations

import click

from controlpanel.cli.client import state
from controlpanel.cli.output import emit, output_option

FLAVOR_COLUMNS = [
    ("NAME", "name"),
    ("GPU", "gpu"),
    ("VCPU", "vcpu_per_unit"),
    ("MEMORY GIB", "memory_gib_per_unit"),
    ("MAX UNITS", "max_units"),
    ("PRICE/H", "price_per_hour"),
]


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
