"""`ajuste capacity`: the cluster's GPUs by model and MIG profile, the flavors' queues and the
nodes taking no new work (`/api/v1/capacity/`, site admins), as three tables or `-o json`."""

from __future__ import annotations

from typing import Any

import click

from controlpanel.cli.client import state
from controlpanel.cli.output import emit, output_option, table, wants_json

POOL_COLUMNS = [
    ("MODEL", "model"),
    ("MIG", "mig_profile"),
    ("TOTAL", "total"),
    ("IN-USE", "in_use"),
    ("UNAVAILABLE", "unavailable"),
    ("FREE", "free"),
    ("NODES", "nodes"),
    ("FLAVORS", "flavor_names"),
]
FLAVOR_COLUMNS = [
    ("FLAVOR", "name"),
    ("GPU", "gpu"),
    ("PER-UNIT", "gpus_per_unit"),
    ("RUNNING", "running_units"),
    ("GPUS-HELD", "running_gpus"),
    ("FREE-UNITS", "free_units"),
    ("WAITING", "waiting"),
    ("OLDEST-WAIT", "oldest_wait"),
]
NODE_COLUMNS = [
    ("NODE", "name"),
    ("MODEL", "model"),
    ("GPUS", "gpus"),
    ("MIG-SLICES", "mig_slices"),
    ("CORDONED", "cordoned"),
    ("READY", "ready"),
    ("WHY", "reason"),
]


def wait_text(seconds: float | None) -> str | None:
    """`1h01m`, `4m10s`, `12s`; None when nothing waits."""
    if seconds is None:
        return None
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _flavor_line(row: dict[str, Any]) -> dict[str, Any]:
    gpu = row["gpu_model"] or "CPU"
    if row["mig_profile"]:
        gpu += f" MIG {row['mig_profile']}"
    return row | {"gpu": gpu, "oldest_wait": wait_text(row["oldest_wait_s"])}


@click.command("capacity")
@output_option
def capacity() -> None:
    """GPUs by model and MIG profile (total, in use, unavailable, free), each flavor's queue
    and oldest wait, and the nodes taking no new work (site admins). The figures are the
    reading the panel's periodic task keeps; the first line says when it was taken."""
    body = state().api().get("capacity/")
    if wants_json():
        emit(body)
        return
    cluster = body["cluster"]
    if body["read_at"] is None:
        click.echo(f"{body['backend']} backend: not read yet (the panel's Celery beat reads it).")
    else:
        click.echo(f"{body['backend']} backend, read at {body['read_at']}.")
    if body["error"]:
        click.echo(f"The last reading failed: {body['error']}")
    if cluster is not None:
        gpus, slices = cluster["gpus"], cluster["mig_slices"]
        click.echo(
            f"GPUs: {gpus['total']} ({gpus['in_use']} in use, {gpus['free']} free); "
            f"MIG slices: {slices['total']} ({slices['in_use']} in use, {slices['free']} free); "
            f"nodes: {cluster['nodes']}, {len(cluster['unavailable_nodes'])} taking no work."
        )
        click.echo("")
        pools = [p | {"flavor_names": ",".join(p["flavors"]) or None} for p in cluster["pools"]]
        table([p | {"mig_profile": p["mig_profile"] or None} for p in pools], POOL_COLUMNS)
    click.echo("")
    table([_flavor_line(row) for row in body["flavors"]], FLAVOR_COLUMNS)
    if cluster is not None and cluster["unavailable_nodes"]:
        click.echo("")
        nodes = [
            n
            | {"cordoned": "yes" if n["cordoned"] else "no", "ready": "yes" if n["ready"] else "no"}
            for n in cluster["unavailable_nodes"]
        ]
        table([n | {"reason": n["reason"] or None} for n in nodes], NODE_COLUMNS)
