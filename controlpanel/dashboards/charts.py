"""The dashboards' headline numbers and charts (the same numbers fill each chart's table),
from the day rollups (selectors.Usage): GPU-hours by user, cost by kind, the judged kinds'
ends by state (registry.py), queue waits, fine-tune throughput."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django.conf import settings

from controlpanel.billing.rules import amount
from controlpanel.dashboards.filters import DashboardFilters
from controlpanel.dashboards.selectors import SUMS, Scope, Usage, workloads
from controlpanel.dashboards.tables import throughput
from controlpanel.engine.admission import WAITING_STATES
from controlpanel.engine.registry import kinds, states_of

# The kinds whose ends are judged (the success rate, the ends by state), and each kind's
# plural in the cost chart.
JUDGED = [kind.name for kind in kinds() if kind.judged_by_ends]


PLURALS = {kind.name: kind.plural for kind in kinds()} | {"": "deleted"}


def headline(scope: Scope, f: DashboardFilters, usage: Usage) -> dict[str, Any]:
    totals = usage.grouped()
    total = totals[0] if totals else dict.fromkeys(SUMS, 0)
    jobs = usage.grouped(kinds=JUDGED)
    ended = jobs[0] if jobs else dict.fromkeys(SUMS, 0)
    failed = ended["ended_failed"] + ended["ended_error"] + ended["ended_sync_failed"]
    judged = ended["ended_done"] + failed
    live = workloads(scope, f)
    return {
        "gpu_hours": total["gpu_seconds"] / 3600,
        "cost": amount(Decimal(total["price_minutes"])),
        "running": live.filter(state__in=states_of(lambda kind: kind.running)).count(),
        "queued": live.filter(state__in=WAITING_STATES, admitted_at=None).count(),
        "failed": failed,
        "done": ended["ended_done"],
        "success_rate": ended["ended_done"] / judged if judged else None,
        "waits": usage.waits()[0],
        "waits_exact": usage.waits_exact,
    }


def per_day(
    f: DashboardFilters, rows: list[dict[str, Any]], series: str, value: str
) -> dict[str, Any]:
    """A chart's data: labels (days) and one dataset per value of `series`."""
    labels = [d.isoformat() for d in f.days]
    names = sorted({str(r[series] or "—") for r in rows})
    data = {name: [0.0] * len(labels) for name in names}
    index = {d: n for n, d in enumerate(f.days)}
    for r in rows:
        if r["day"] in index:
            data[str(r[series] or "—")][index[r["day"]]] += float(r[value])
    return {"labels": labels, "series": [{"name": n, "data": data[n]} for n in names]}


def _gpu_hours(f: DashboardFilters, usage: Usage) -> dict[str, Any]:
    gpu = per_day(f, usage.grouped("day", "owner"), "owner", "gpu_seconds")
    for s in gpu["series"]:
        s["data"] = [round(v / 3600, 3) for v in s["data"]]
    return gpu | {"title": "GPU-hours per day by user", "unit": "GPU-hours"}


def _cost(f: DashboardFilters, usage: Usage) -> dict[str, Any]:
    cost = per_day(f, usage.grouped("day", "kind"), "kind", "price_minutes")
    for s in cost["series"]:
        s["data"] = [float(amount(Decimal(str(v)))) for v in s["data"]]
        s["name"] = PLURALS.get(s["name"], s["name"] + "s")
    return cost | {"title": f"Cost per day by kind ({settings.CURRENCY})", "unit": "cost"}


def _final_states(f: DashboardFilters, usage: Usage) -> dict[str, Any]:
    ends = usage.grouped("day", kinds=JUDGED)
    states = {"DONE": "ended_done", "FAILED": "ended_failed", "ERROR": "ended_error"}
    states |= {"SYNC_FAILED": "ended_sync_failed", "INTERRUPTED": "ended_interrupted"}
    index = {d: n for n, d in enumerate(f.days)}
    final: dict[str, Any] = {"labels": [d.isoformat() for d in f.days], "series": []}
    for state, column in states.items():
        data = [0] * len(f.days)
        for r in ends:
            data[index[r["day"]]] += int(r[column])
        final["series"].append({"name": state, "data": data})
    return final | {"title": "Jobs by final state per day", "unit": "jobs"}


def _queue_wait(f: DashboardFilters, usage: Usage) -> dict[str, Any]:
    index = {d: n for n, d in enumerate(f.days)}
    wait_chart: dict[str, Any] = {"labels": [d.isoformat() for d in f.days], "series": []}
    for name in ("p50", "p95"):
        data_w: list[float | None] = [None] * len(f.days)
        for r in usage.waits()[1]:
            if r["day"] in index:
                data_w[index[r["day"]]] = round(r[name] / 60, 2) if r[name] is not None else None
        wait_chart["series"].append({"name": f"{name} (min)", "data": data_w})
    title = "Queue wait per day" + ("" if usage.waits_exact else " (±2.5 %)")
    return wait_chart | {"title": title, "unit": "minutes"}


def _throughput(scope: Scope, f: DashboardFilters) -> dict[str, Any]:
    runs = throughput(scope, f)
    return {
        "labels": [f"{r['name']} ({str(r['id'])[:8]})" for r in runs],
        "series": [{"name": "tokens/s", "data": [round(r["tokens_per_s"], 1) for r in runs]}],
        "title": "Fine-tune throughput of recent runs",
        "unit": "tokens/s",
        "kind": "bar",
    }


def charts(scope: Scope, f: DashboardFilters, usage: Usage) -> dict[str, dict[str, Any]]:
    """Every chart's data (the same numbers fill the table beside it)."""
    result = {
        "gpu-hours": _gpu_hours(f, usage),
        "cost": _cost(f, usage),
        "final-states": _final_states(f, usage),
        "queue-wait": _queue_wait(f, usage),
        "throughput": _throughput(scope, f),
    }
    for chart in result.values():
        # For the canvas's data attribute (htmx drops <script> elements from swapped content).
        chart["json"] = json.dumps(
            {"labels": chart["labels"], "series": chart["series"], "unit": chart["unit"]}
        )
        columns = [s["data"] for s in chart["series"]]
        chart["rows"] = [
            [label, [column[n] for column in columns]] for n, label in enumerate(chart["labels"])
        ]
    return result
