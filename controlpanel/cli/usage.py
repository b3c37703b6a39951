"""`ajuste usage`: billed usage (`/api/v1/usage/`) by day or month, project, user, workload
and flavor. Site admins read every project, managers the projects they manage.

`ajuste -p alpha usage --month 2025-01 --group day --user ana`; without `-p` (or with
`--all`) every project you may read.
"""

from __future__ import annotations

from typing import Any

import click

from controlpanel.cli.client import state
from controlpanel.cli.output import emit, output_option

USAGE_COLUMNS = [
    ("PERIOD", "period"),
    ("PROJECT", "project"),
    ("USER", "user"),
    ("WORKLOAD", "workload_short"),
    ("NAME", "workload_name"),
    ("KIND", "kind"),
    ("FLAVOR", "flavor"),
    ("MINUTES", "minutes"),
    ("GPU-H", "gpu_hours"),
    ("AMOUNT", "amount"),
    ("CURRENCY", "currency"),
    ("EST", "est"),
]


@click.command("usage")
@click.option("--user", default=None, help="Only this user's workloads (username).")
@click.option("--workload", default=None, metavar="ID", help="Only this workload (its id).")
@click.option("--flavor", default=None, help="Only this flavor (its name).")
@click.option("--month", default=None, metavar="YYYY-MM", help="One month (default: this one).")
@click.option("--start", default=None, metavar="DAY", help="First day: YYYY-MM-DD or YYYY-MM.")
@click.option("--end", default=None, metavar="DAY", help="Last day: YYYY-MM-DD or YYYY-MM.")
@click.option(
    "--group",
    type=click.Choice(["month", "day"]),
    default="month",
    show_default=True,
    help="One row per month or per day (UTC).",
)
@click.option(
    "--all",
    "all_projects",
    is_flag=True,
    help="Every project you may read, not only the one of -p/AJUSTE_PROJECT.",
)
@output_option
def usage(
    user: str | None,
    workload: str | None,
    flavor: str | None,
    month: str | None,
    start: str | None,
    end: str | None,
    group: str,
    all_projects: bool,
) -> None:
    """Billed usage: only RUNNING time, each started minute in full (one at least), at the
    flavor's price in effect for that minute, per unit; UTC days and months."""
    current = state()
    rows: list[dict[str, Any]] = current.api().paginate(
        "usage/",
        project=None if all_projects else current.project,
        user=user,
        workload=workload,
        flavor=flavor,
        month=month,
        start=start,
        end=end,
        group=group,
    )
    for row in rows:
        row["workload_short"] = (row.get("workload") or "")[:8] or None
        row["est"] = "yes" if row.get("estimated") else ""
    emit(rows, USAGE_COLUMNS)
