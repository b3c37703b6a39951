"""Billing ledger figures on PostgreSQL, with a synthetic month of runs:

1. recording throughput: runs recorded per second by `billing.services.run_record` (one
   transaction each, as the engine's hook does), on first recording and again (nothing
   changed: the meter's fast path);
2. the month's size: runs, billed GPU-minutes, ledger lines;
3. reads: the month's total, the per-project table, one project's invoice lines (median of 5);
4. `month_rebuild` of the whole month, and that it gives the same total.

    .venv/bin/python bench/bench_billing.py [--runs 20000] [--projects 50] [--minutes 500]

Runs last `--minutes` on average (uniform 1 .. 2×), 1 to 8 units, spread over March 2025,
some across the month's end, with a price change mid-month. Uses PostgreSQL (database
`ajuste_bench_billing`, recreated) on loopback.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _panel import configure, fresh_database

configure("ajuste_bench_billing", 14)
MONTH = date(2025, 3, 1)
START = datetime(2025, 3, 1, tzinfo=UTC)


def median_s(call: Any, times: int = 5) -> float:
    spent = []
    for _ in range(times):
        begin = time.perf_counter()
        call()
        spent.append(time.perf_counter() - begin)
    return statistics.median(spent)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--projects", type=int, default=50)
    parser.add_argument("--minutes", type=int, default=500, help="mean run length")
    args = parser.parse_args()
    fresh_database()

    import django

    django.setup()
    from django.db.models.signals import post_save

    from controlpanel.billing.models import Line
    from controlpanel.billing.selectors import invoice_lines, month_by_project, month_total
    from controlpanel.billing.services import month_rebuild, run_record
    from controlpanel.engine.models import JobRun
    from controlpanel.flavors.models import Flavor, FlavorPrice
    from controlpanel.projects.models import Project

    post_save.disconnect(sender=JobRun, dispatch_uid="billing-run-saved")  # recorded below
    rng = random.Random(14)
    flavor = Flavor.objects.create(name="bench-gpu", vcpu_per_unit=8, memory_gib_per_unit=64)
    FlavorPrice.objects.create(flavor=flavor, valid_from=START, price_per_hour=Decimal("2.8"))
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=START + timedelta(days=15), price_per_hour=Decimal("3.1")
    )
    projects = Project.objects.bulk_create(
        Project(slug=f"bench-{n}", name=f"Bench {n}") for n in range(args.projects)
    )
    month_s = 31 * 24 * 3600
    runs = []
    for n in range(args.runs):
        start = START + timedelta(seconds=rng.uniform(0, month_s - 600))
        length = timedelta(seconds=rng.uniform(60, 2 * args.minutes * 60))
        runs.append(
            JobRun(
                uid=f"bench-{n}",
                project=rng.choice(projects),
                run=1,
                flavor=flavor,
                units=rng.choice((1, 1, 2, 4, 8)),
                started_at=start,
                finished_at=start + length,
            )
        )
    JobRun.objects.bulk_create(runs, batch_size=2000)
    ids = list(JobRun.objects.values_list("pk", flat=True))
    now = START + timedelta(days=40)

    begin = time.perf_counter()
    for pk in ids:
        run_record(run_id=pk, now=now)
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    for pk in ids:
        run_record(run_id=pk, now=now)
    again = time.perf_counter() - begin

    total = month_total(month=MONTH)
    print(f"runs {len(ids):,}; lines {Line.objects.count():,}")
    print(f"March: {total.minutes:,} run-minutes, {total.unit_minutes:,} GPU-minutes (× units)")
    print(f"recording, first time: {len(ids) / first:,.0f} runs/s ({first:.1f} s)")
    print(f"recording again (nothing changed): {len(ids) / again:,.0f} runs/s ({again:.1f} s)")
    print(f"month total: {median_s(lambda: month_total(month=MONTH)) * 1000:.1f} ms")
    print(f"per-project table: {median_s(lambda: month_by_project(month=MONTH)) * 1000:.1f} ms")
    one = projects[0]
    spent = median_s(lambda: invoice_lines(month=MONTH, project=one))
    print(f"one project's invoice lines: {spent * 1000:.1f} ms")
    begin = time.perf_counter()
    month_rebuild(month=MONTH, now=now)
    print(f"month_rebuild: {time.perf_counter() - begin:.1f} s")
    assert month_total(month=MONTH) == total, "a rebuild must give the same total"
    print(f"total {total.amount} {total.currency}, identical after the rebuild")


if __name__ == "__main__":
    main()
