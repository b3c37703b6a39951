"""Sizes as people read them, in binary units (KiB, MiB...: 1 KiB = 1024 bytes), the same on
the pages and in the `ajuste` CLI. Plain Python: the CLI imports it and no Django."""

from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def binary_size(size: int | None) -> str:
    """`999 B`, `1.5 KiB`, `2.0 GiB`; `-` when unknown."""
    if size is None:
        return "-"
    value = float(size)
    for unit in UNITS:
        if abs(value) < 1024 or unit == UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # the loop returns at the last unit
