"""The admins' billing tables, written once for the page and its CSV: each table is a list of
rows of text cells (a cell may carry a link on the page), so the CSV is the page's rows, cell
for cell, by construction. The CSV streams (csv.writer over a generator)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.http import StreamingHttpResponse
from django.urls import reverse

from controlpanel.billing.admin_months import ProjectMonth, Usage, hours, usage_of
from controlpanel.billing.models import Line
from controlpanel.billing.rules import MINUTE
from controlpanel.billing.templatetags.money import exact_amount, money_text
from controlpanel.flavors.models import FlavorPrice
from controlpanel.projects.models import Project

FORMULA = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Cell:
    """`text` is what the page shows and the CSV holds; `free`: typed by a user (a name),
    quoted in the CSV if a spreadsheet would run it as a formula; `title`: the whole value
    behind a shortened text, on the page only."""

    text: str
    href: str = ""
    free: bool = False
    title: str = ""
    badge: str = ""  # a word after the text on the page ("deleted"), not in the CSV

    def csv(self) -> str:
        return "'" + self.text if self.free and self.text.startswith(FORMULA) else self.text


@dataclass
class Table:
    name: str
    headers: list[str]
    numeric: frozenset[int]
    rows: Iterable[list[Cell]] = field(default_factory=list)

    def is_num(self, index: int) -> bool:
        return index in self.numeric


def money(value: Decimal) -> str:
    """As every page shows money (templatetags/money.py): a CPU minute's 0.0007 is not 0.00."""
    return money_text(value)


def when(moment: datetime | None) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S}" if moment else ""


def month_text(month: date) -> str:
    return f"{month:%Y-%m}"


def _usage_cells(usage: Usage, *, exact: bool = False) -> list[Cell]:
    """`exact`: a drill-down row's own money, not rounded (invoice figures are, per line)."""
    money_of = exact_amount(usage) if exact else usage.amount
    return [Cell(str(usage.gpu_hours)), Cell(str(usage.cpu_hours)), Cell(money(money_of))]


def projects_table(month: date, rows: list[ProjectMonth]) -> Table:
    def row(item: ProjectMonth) -> list[Cell]:
        link = reverse(
            "billing-project", kwargs={"month": month_text(month), "slug": item.project.slug}
        )
        percent = item.change_percent
        return [
            Cell(item.project.slug, link, free=True),
            Cell(item.project.name, free=True),
            *_usage_cells(item.usage),
            Cell(money(item.previous)),
            Cell(money(item.change)),
            Cell("" if percent is None else f"{percent}"),
            Cell(str(item.usage.adjustments)),
        ]

    return Table(
        name="projects",
        headers=[
            "Project",
            "Name",
            "GPU-hours",
            "CPU-hours",
            "Amount",
            "Previous month",
            "Change",
            "Change %",
            "Adjustment lines",
        ],
        numeric=frozenset(range(2, 9)),
        rows=[row(item) for item in rows],
    )


def users_table(month: date, project: Project, rows: list[dict[str, Any]]) -> Table:
    base = reverse("billing-project", kwargs={"month": month_text(month), "slug": project.slug})

    def row(item: dict[str, Any]) -> list[Cell]:
        user = item["user"] or ""
        return [
            Cell(
                user or "(workload deleted)",
                f"{base}?{urlencode({'user': user})}" if user else "",
                free=True,
            ),
            Cell(str(item["workloads"])),
            Cell(str(item["runs"])),
            *_usage_cells(item["usage"], exact=True),
        ]

    return Table(
        name="users",
        headers=["User", "Workloads", "Runs", "GPU-hours", "CPU-hours", "Amount"],
        numeric=frozenset(range(1, 6)),
        rows=[row(item) for item in rows],
    )


def workloads_table(month: date, project: Project, rows: Iterable[dict[str, Any]]) -> Table:
    base = reverse("billing-project", kwargs={"month": month_text(month), "slug": project.slug})

    def row(item: dict[str, Any]) -> list[Cell]:
        workload = item["workload"]
        return [
            Cell(
                item["name"] or "(deleted)",
                f"{base}?{urlencode({'workload': workload})}" if workload else "",
                free=True,
                badge="deleted" if item.get("deleted") else "",
            ),
            Cell(item["kind"] or ""),
            Cell(item["user"] or "", free=True),
            Cell(str(item["runs"])),
            *_usage_cells(usage_of(item), exact=True),
        ]

    return Table(
        name="workloads",
        headers=["Workload", "Kind", "User", "Runs", "GPU-hours", "CPU-hours", "Amount"],
        numeric=frozenset(range(3, 7)),
        rows=(row(item) for item in rows),
    )


def runs_table(month: date, project: Project, rows: Iterable[dict[str, Any]]) -> Table:
    """One row per pod run, named by its workload, its run number and a short id (the whole
    id in the link's title and on the run's page), so that it fits a 1366 px screen."""
    # one reverse() for the table, not one per run (a CSV has thousands of rows)
    template = reverse(
        "billing-run", kwargs={"month": month_text(month), "slug": project.slug, "run_id": 0}
    )
    prefix = template.removesuffix("0/")

    def row(item: dict[str, Any]) -> list[Cell]:
        link = f"{prefix}{item['run_pk']}/"
        usage = usage_of(item)
        if item["finished"] is not None:
            end = when(item["finished"]) + (" (estimated)" if item["estimated"] else "")
        else:
            end = f"running, billed to {when(item['billed_to'])}"
        uid = item["uid"] or ""
        number = f" #{item['number']}" if item["number"] else ""
        gone = item["name"] is None  # its workload deleted: named from what was kept
        name = f"{item['name'] or item['kept_name'] or '(deleted)'}{number} · {uid[:8]}"
        return [
            Cell(name, link, free=True, title=f"run {uid}", badge="deleted" if gone else ""),
            Cell(item["user"] or item["kept_user"] or "", free=True),
            Cell(when(item["started"])),
            Cell(end),
            Cell(f"{item['flavor_name']} × {item['run_units']}"),
            Cell(str(usage.minutes)),
            Cell(money(exact_amount(usage))),
            Cell(str(usage.adjustments)),
        ]

    return Table(
        name="runs",
        headers=[
            "Run",
            "User",
            "Started (UTC)",
            "Ended (UTC)",
            "Flavor × units",
            "Minutes",
            "Amount",
            "Adjustment lines",
        ],
        numeric=frozenset({5, 6, 7}),
        rows=(row(item) for item in rows),
    )


def lines_table(lines: Iterable[Line]) -> Table:
    def row(line: Line) -> list[Cell]:
        if line.is_adjustment:
            kind = f"adjustment of {month_text(line.of_period)} (locked)"
            span = ""
        else:
            first = line.run_start + (line.first_minute or 0) * MINUTE
            kind, span = "usage", f"{when(first)} → {when(first + line.minutes * MINUTE)}"
        version = (
            f"#{line.price_id} from {when(line.price.valid_from)}" if line.price else "no price yet"
        )
        return [
            Cell(kind),
            Cell(span),
            Cell("" if line.first_minute is None else str(line.first_minute)),
            Cell(str(line.minutes)),
            Cell(str(line.units)),
            Cell(version),
            Cell(f"{line.price_per_hour}"),
            Cell(money(Decimal(line.minutes * line.units * line.price_per_hour) / 60)),
        ]

    return Table(
        name="lines",
        headers=[
            "Line",
            "Minutes from → to (UTC)",
            "First minute",
            "Minutes",
            "Units",
            "Price version",
            "Price per unit-hour",
            "Amount",
        ],
        numeric=frozenset({2, 3, 4, 6, 7}),
        rows=[row(line) for line in lines],
    )


def invoice_table(lines: list[dict[str, Any]]) -> Table:
    def row(line: dict[str, Any]) -> list[Cell]:
        adjusts = line["adjusts"]
        return [
            Cell(line["flavor"]),
            Cell(str(line["units"])),
            Cell(f"{line['price_per_hour']}"),
            Cell(str(line["minutes"])),
            Cell(str(hours(line["minutes"] * line["units"]))),
            Cell(f"adjusts {month_text(adjusts)}" if adjusts else ""),
            Cell(money(line["amount"])),
        ]

    return Table(
        name="invoice",
        headers=[
            "Flavor",
            "Units",
            "Price per unit-hour",
            "Minutes",
            "Unit-hours",
            "Note",
            "Amount",
        ],
        numeric=frozenset({1, 2, 3, 4, 6}),
        rows=[row(line) for line in lines],
    )


def prices_table(prices: Iterable[FlavorPrice], now: datetime) -> Table:
    current: dict[int, int] = {}
    listed = list(prices)
    for price in listed:  # newest first per flavor: the first one not in the future is in effect
        if price.valid_from <= now:
            current.setdefault(price.flavor_id, price.pk)

    def row(price: FlavorPrice) -> list[Cell]:
        state = "in effect" if current.get(price.flavor_id) == price.pk else ""
        if price.valid_from > now:
            state = "from then on"
        return [
            Cell(price.flavor.name),
            Cell(when(price.valid_from)),
            Cell(f"{price.price_per_hour}"),
            Cell(state),
        ]

    return Table(
        name="prices",
        headers=["Flavor", "Valid from (UTC)", "Price per unit-hour", "Now"],
        numeric=frozenset({2}),
        rows=[row(price) for price in listed],
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_response(table: Table, filename: str) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(table.headers)
        for row in table.rows:
            yield writer.writerow([cell.csv() for cell in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
