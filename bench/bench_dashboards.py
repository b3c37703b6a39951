"""Dashboard server time with a lot of history (issue #15's measure):

    .venv/bin/python bench/bench_dashboards.py [--jobs 1000000] [--projects 4] [--days 90]
                                               [--requests 30] [--keep]

Makes `--jobs` workloads with their runs (`manage.py seed_history`, spread over `--projects`
projects and `--days` days) in a fresh PostgreSQL database (`ajuste_bench_dash`; `--keep` reuses
it when it holds the history already), then times in this process, through Django's full
request path (middleware, sessions, templates), as a site admin:
- one project's dashboard (30 days, and this month),
- the all-projects dashboard (30 days),
- the plain job list page of the same project (the goal: the dashboard's p95 at most 3x it and
  at most 300 ms).
Prints p50/p95 of `--requests` requests each, after one warm-up request.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DB_NAME = "ajuste_bench_dash"
os.environ.update(
    {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
        "REDIS_URL": "redis://127.0.0.1:6379/13",
        "DEBUG": "0",
        "HTTPS": "0",
        "SECRET_KEY": "bench-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
        "ALLOWED_HOSTS": "testserver,127.0.0.1",
        "STATIC_MANIFEST": "0",
        "COMPUTE_BACKEND": "kubernetes",  # ALLOWED_HOSTS has testserver: never the local one
        "DJANGO_SETTINGS_MODULE": "controlpanel.settings",
    }
)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def manage(*args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, check=True)


def fresh_database(jobs: int, projects: int, days: int, keep: bool) -> None:
    import psycopg

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone()
        if keep and exists:
            return
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    manage("migrate", "-v", "0")
    started = time.perf_counter()
    for n in range(projects):
        share = jobs // projects + (1 if n < jobs % projects else 0)
        manage(
            "seed_history",
            "--jobs",
            str(share),
            "--days",
            str(days),
            "--project",
            f"team{n}",
            "--seed",
            str(n),
        )
    with psycopg.connect(f"postgres://postgres@127.0.0.1:5432/{DB_NAME}", autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    print(f"seeded {jobs} workloads in {time.perf_counter() - started:.0f} s")


def timed(client: object, url: str, requests: int) -> tuple[float, float]:
    client.get(url)  # type: ignore[attr-defined]  # warm-up: caches, first queries
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(url)  # type: ignore[attr-defined]
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}")
    return statistics.median(times), percentile(times, 0.95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--projects", type=int, default=4)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="reuse the seeded database")
    args = parser.parse_args()
    fresh_database(args.jobs, args.projects, args.days, args.keep)

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from controlpanel.engine.models import Workload

    admin, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(admin)
    total = Workload.objects.count()
    in_one = Workload.objects.filter(project__slug="team0").count()
    print(
        f"dashboards: {total} workloads in {args.projects} projects ({in_one} in team0), "
        f"{os.cpu_count()} CPUs, PostgreSQL on loopback, {args.requests} requests each"
    )
    pages = [
        ("job list page, team0", "/p/team0/jobs/"),
        ("team0 dashboard, 30 days", "/p/team0/dashboard/?range=30d"),
        ("team0 dashboard, this month", "/p/team0/dashboard/?range=month"),
        ("all projects' dashboard, 30 days", "/dashboard/?range=30d"),
    ]
    baseline = None
    for name, url in pages:
        p50, p95 = timed(client, url, args.requests)
        baseline = baseline or p95
        print(f"{name:<36} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  x{p95 / baseline:4.2f} the list")


if __name__ == "__main__":
    main()
