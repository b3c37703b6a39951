"""The admins' billing pages on a large month, server time per request (PostgreSQL).

A synthetic March 2025 written straight into the ledger (bulk inserts, not run_record: the
pages read lines, and recording is bench_billing.py's figure): `--projects` projects,
`--users` users, 10 workloads each, `--runs` closed runs of `--minutes` minutes on average
(1 to 2× that), 1 unit each, priced at two versions (a change mid-month); one line per run.
Then each page is requested `--times` times through Django's test client as a site admin
(the whole request in-process: middleware, views, SQL, templates), p50 and p95 in ms.

    .venv/bin/python bench/bench_billing_pages.py [--runs 100000] [--projects 100] [--users 1000]
                                                  [--times 20] [--rounds 1] [--keep]

Uses the database `ajuste_bench_billing_pages` (recreated; `--keep` reuses it, migrated, when
it was filled before) on loopback. `--rounds N` requests the pages N times over, one page after
the other each round, and reports each page's p50 and p95 over all its requests.
"""

from __future__ import annotations

import argparse
import os
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

configure("ajuste_bench_billing_pages", 13)
MONTH = date(2025, 3, 1)
START = datetime(2025, 3, 1, tzinfo=UTC)


def fill(args: argparse.Namespace) -> dict[str, Any]:
    from django.db.models.signals import post_save

    from controlpanel.accounts.models import User
    from controlpanel.billing.models import Line
    from controlpanel.engine.models import JobRun
    from controlpanel.flavors.models import Flavor, FlavorPrice
    from controlpanel.jobs.models import Job
    from controlpanel.projects.models import Project

    post_save.disconnect(sender=JobRun, dispatch_uid="billing-run-saved")  # lines written below
    rng = random.Random(14)
    flavor = Flavor.objects.create(name="bench-gpu", vcpu_per_unit=8, memory_gib_per_unit=64)
    old = FlavorPrice.objects.create(
        flavor=flavor, valid_from=START - timedelta(days=30), price_per_hour=Decimal("2.8")
    )
    new = FlavorPrice.objects.create(
        flavor=flavor, valid_from=START + timedelta(days=15), price_per_hour=Decimal("3.1")
    )
    projects = Project.objects.bulk_create(
        Project(slug=f"bench-{n}", name=f"Bench {n}") for n in range(args.projects)
    )
    users = User.objects.bulk_create(User(username=f"user-{n}") for n in range(args.users))
    jobs = Job.objects.bulk_create(
        (
            Job(
                project=projects[n % len(projects)],
                owner=users[n % len(users)],
                name=f"job-{n}",
                image="x/y:1",
                flavor=flavor,
                gpu=1,
            )
            for n in range(args.users * 10)
        ),
        batch_size=2000,
    )
    month_s = 31 * 24 * 3600
    runs, lengths = [], []
    for n in range(args.runs):
        job = jobs[n % len(jobs)]
        minutes = rng.randint(1, 2 * args.minutes - 1)
        start = START + timedelta(seconds=rng.uniform(0, month_s - minutes * 60 - 60))
        runs.append(
            JobRun(
                uid=f"bench-{n}",
                job=job,
                project_id=job.project_id,
                run=1,
                flavor=flavor,
                units=1,
                started_at=start,
                finished_at=start + timedelta(minutes=minutes),
            )
        )
        lengths.append(minutes)
    runs = JobRun.objects.bulk_create(runs, batch_size=5000)
    lines = []
    for run, minutes in zip(runs, lengths, strict=True):
        assert run.started_at is not None
        price = new if run.started_at >= new.valid_from else old
        lines.append(
            Line(
                run=run,
                project_id=run.project_id,
                flavor=flavor,
                price=price,
                price_per_hour=price.price_per_hour,
                units=1,
                currency="EUR",
                period=MONTH,
                of_period=MONTH,
                run_start=run.started_at,
                first_minute=0,
                minutes=minutes,
            )
        )
    Line.objects.bulk_create(lines, batch_size=5000)
    # The lines were written in bulk, not by their writer (services.run_record), which keeps
    # each workload's month with them: sum it from the lines as a month rebuild does.
    from controlpanel.billing.rollup import rollup_rebuild

    rollup_rebuild(month=MONTH)
    return {"runs": runs, "minutes": sum(lengths), "projects": projects}


def timed(client: Any, url: str, times: int) -> list[float]:
    spent = []
    for _ in range(times):
        begin = time.perf_counter()
        response = client.get(url)
        if response.streaming:
            b"".join(response.streaming_content)
        assert response.status_code == 200, (url, response.status_code)
        spent.append((time.perf_counter() - begin) * 1000)
    return spent


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def filled() -> bool:
    """Whether the bench's database exists and holds a filled month."""
    import psycopg

    name = os.environ["DATABASE_URL"].rsplit("/", 1)[1]
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres") as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            return False
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        try:
            return bool(conn.execute("SELECT 1 FROM billing_line LIMIT 1").fetchone())
        except psycopg.Error:
            return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--projects", type=int, default=100)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--minutes", type=int, default=100, help="mean run length")
    parser.add_argument("--times", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1, help="the pages, this many times over")
    parser.add_argument("--keep", action="store_true", help="reuse a filled database")
    args = parser.parse_args()
    keep = args.keep and filled()
    if not keep:
        fresh_database()

    import django

    django.setup()
    if keep:  # the filled database, migrated to this checkout (its 1,001 users would fail
        # the local backend's trust check, which a bench does not need)
        from django.core.management import call_command

        call_command("migrate", verbosity=0, skip_checks=True)
    from django.db import connection
    from django.db.models import Sum
    from django.test import Client

    from controlpanel.accounts.models import User
    from controlpanel.billing.models import Line
    from controlpanel.projects.models import Project

    if not keep:
        begin = time.perf_counter()
        made = fill(args)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(
            f"filled in {time.perf_counter() - begin:.0f} s: {len(made['runs']):,} runs, "
            f"{made['minutes']:,} GPU-minutes in March, {args.projects} projects, "
            f"{args.users} users"
        )
    project = Project.objects.get(slug="bench-0")
    run_id = Line.objects.filter(project=project).values_list("run_id", flat=True).first()
    minutes = Line.objects.filter(period=MONTH).aggregate(m=Sum("minutes"))["m"]
    print(f"the month: {minutes:,} GPU-minutes; load average {os.getloadavg()[0]:.2f}")
    admin, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_staff": True})
    client = Client(HTTP_HOST="localhost")
    client.force_login(admin)
    base = f"/billing/2025-03/p/{project.slug}/"
    pages = [
        ("month table (100 projects)", "/billing/?month=2025-03"),
        ("month table CSV", "/billing/projects.csv?month=2025-03"),
        ("project drill-down, page 1", base),
        ("project drill-down, runs page 10", f"{base}?rpage=10"),
        ("project drill-down, one user", f"{base}?user=user-0"),
        ("a run's lines", f"{base}runs/{run_id}/"),
        ("invoice", f"{base}invoice/"),
        ("project runs CSV (all its runs)", f"{base}runs.csv"),
        ("prices", "/billing/prices/"),
    ]
    client.get(pages[0][1])  # warm: templates, connections
    spent: dict[str, list[float]] = {label: [] for label, _ in pages}
    for _ in range(args.rounds):
        for label, url in pages:
            spent[label].extend(timed(client, url, args.times))
    print(f"{'page':40} {'p50 ms':>8} {'p95 ms':>8}")
    for label, values in spent.items():
        print(f"{label:40} {statistics.median(values):8.1f} {p95(values):8.1f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
