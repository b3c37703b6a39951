"""What a run's log and curve cost PostgreSQL (issue 26), before and after.

(a) One curve update (a log read carrying one progress point) with C points stored: the write-
ahead log it writes and its time. Before (up to fd96145): the workload row's `loss_curve` JSON
list rewritten whole, replayed here as the same UPDATE on a `loss_curve` jsonb column the script
adds to its own copy of the table. After: `engine.curves.append` and the row's save, as
`logs._commit` runs them. WAL bytes per statement come from `EXPLAIN (ANALYZE, WAL)` (this
server's WAL counter is shared with other databases), each write probed in a savepoint that is
rolled back, then run for real. C = 2,000 (the bound a curve is kept at) and 10,000 (the bound
raised to 10,000 in this script for both sides, to see how each grows).

(b) PostgreSQL growth per 1,000 ended jobs of N log lines each: the log table (lines) and the
archive table, `pg_total_relation_size`, with archiving off (lines stay) and on (each run's log
moved to the embedded S3 server, s3rver, by `logarchive.move_to_store`, then VACUUM twice:
a b-tree page emptied by one VACUUM is recycled by the next). Further batches (`--batches`) are
then stored and moved, to show the steady state (the freed pages reused).

    .venv/bin/python bench/bench_log_storage.py [--jobs 1000] [--lines 1000] [--updates 40]
        [--batches 3] [--no-curve]

PostgreSQL database `ajuste_bench_logstore` (recreated) and Redis database 9.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _panel import configure, fresh_database

configure("ajuste_bench_logstore", 9)

MB = 1024 * 1024


class WalProbe:
    """A Django execute wrapper: every INSERT/UPDATE/DELETE is first run under
    `EXPLAIN (ANALYZE, WAL)` inside a savepoint rolled back, its WAL bytes added up, then run."""

    def __init__(self) -> None:
        self.wal = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not many and sql.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            cursor = context["cursor"]
            cursor.execute("SAVEPOINT wal_probe")
            cursor.execute("EXPLAIN (ANALYZE, WAL, FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
            self.wal += plan[0]["Plan"].get("WAL Bytes", 0)
            cursor.execute("ROLLBACK TO SAVEPOINT wal_probe")
        return execute(sql, params, many, context)


def make_job(name: str, **fields: Any) -> Any:
    from controlpanel.accounts.models import User
    from controlpanel.flavors.models import Flavor
    from controlpanel.jobs.models import Job
    from controlpanel.projects.models import Membership, Project

    project = Project.objects.filter(slug="alpha").first()
    if project is None:
        project = Project.objects.create(slug="alpha", name="Alpha", gpu_quota=100)
        owner = User.objects.create_user("owner", password="bench-password-123")  # noqa: S106
        Membership.objects.create(project=project, user=owner, role="manager")
    owner = User.objects.get(username="owner")
    flavor = Flavor.objects.get(name="h100-1-gpu")
    return Job.objects.create(
        project=project, owner=owner, name=name, image="x", flavor=flavor, **fields
    )


def point(step: int) -> list[Any]:
    return [step, round(3.0 - step / 7919, 6), 5123.4 + step % 97, 1e-4]


def curve_update(points: int, updates: int) -> dict[str, float]:
    """WAL bytes and milliseconds of one update with `points` stored, before and after."""
    from django.db import connection, transaction

    from controlpanel.engine import curves

    curves.MAX_CURVE_POINTS = max(points + updates + 1, 2000)
    table = "workloads_workload"
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS loss_curve jsonb")
    old, new = make_job(f"old-{points}"), make_job(f"new-{points}")
    curve = [point(s) for s in range(1, points + 1)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET loss_curve = %s WHERE id = %s",  # noqa: S608
            [json.dumps(curve), old.pk],
        )
    curves.replace(new, curve)
    new.refresh_from_db()
    result: dict[str, list[float]] = {"old_wal": [], "new_wal": [], "old_ms": [], "new_ms": []}
    update_old = (
        f"UPDATE {table} SET log_cursor = %s, log_lines = %s, progress = %s, loss_curve = %s,"  # noqa: S608
        " updated_at = now() WHERE id = %s"
    )
    for n in range(updates):
        step = points + n + 1
        progress = json.dumps({"step": step, "loss": point(step)[1]})
        # Before: the whole list, one point longer, written back with the row.
        curve.append(point(step))
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(update_old, [f"c{n}", step, progress, json.dumps(curve), old.pk])
        result["old_ms"].append((time.perf_counter() - started) * 1000)
        probe = WalProbe()
        with transaction.atomic(), connection.execute_wrapper(probe), connection.cursor() as cur:
            cur.execute(update_old, [f"c{n}", step, progress, json.dumps(curve), old.pk])
        result["old_wal"].append(probe.wal)
        # After: the new point appended, the row's counters saved (logs._commit's save).
        for timed in (False, True):
            probe = WalProbe()
            started = time.perf_counter()
            with transaction.atomic():
                with connection.execute_wrapper(probe) if not timed else _nothing():
                    new.log_cursor, new.log_lines = f"c{n}", step
                    new.progress = {"step": step}
                    curves.append(new, [point(step)])
                    new.save(
                        update_fields=[
                            "log_cursor",
                            "log_lines",
                            "progress",
                            "curve_points",
                            "updated_at",
                        ]
                    )
                if not timed:
                    transaction.set_rollback(True)
            if timed:
                result["new_ms"].append((time.perf_counter() - started) * 1000)
            else:
                new.refresh_from_db()
                result["new_wal"].append(probe.wal)
    assert curves.read(new) == curve, "the appended curve reads back as the list"
    return {key: statistics.median(values) for key, values in result.items()}


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def log_line(job: int, n: int) -> str:
    return (
        f"2026-12-05T11:{n // 60 % 60:02d}:{n % 60:02d}Z step {n}/1000 loss={3 - n / 977:.4f} "
        f"lr=1.0e-04 tokens/s={5000 + (job * 31 + n * 17) % 997} gpu_mem=61.{n % 10}GiB"
    )


def store_ended_jobs(count: int, lines: int, first: int) -> list[Any]:
    """`count` ended jobs with `lines` lines each, copied into the log table (COPY)."""
    from django.db import connection

    from controlpanel.jobs.states import JobState

    jobs = [
        make_job(f"ended-{first + i}", state=JobState.DONE, logs_archived=True, log_lines=lines)
        for i in range(count)
    ]
    with connection.cursor() as cursor:
        raw = cursor.cursor
        with raw.copy("COPY workloads_joblogline (job_id, run, seq, text) FROM STDIN") as copy:
            for i, job in enumerate(jobs):
                for n in range(1, lines + 1):
                    copy.write_row((job.pk, 1, n, log_line(first + i, n)))
    return jobs


def sizes() -> tuple[int, int]:
    """The log table (heap and indexes) and the archive table, in bytes."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_total_relation_size('workloads_joblogline'),"
            " pg_total_relation_size('workloads_logarchive')"
        )
        lines, archives = cursor.fetchone()
    return lines, archives


def heap_and_indexes() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_relation_size('workloads_joblogline'),"
            " pg_indexes_size('workloads_joblogline')"
        )
        heap, indexes = cursor.fetchone()
    return f"(heap {heap / MB:.1f}, indexes {indexes / MB:.1f})"


def vacuum() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM workloads_joblogline, workloads_logarchive")


def log_growth(jobs: int, lines: int, batches: int) -> None:
    from controlpanel.engine import logarchive
    from controlpanel.engine.models import LogArchive

    base = sum(sizes())
    batch = store_ended_jobs(jobs, lines, 0)
    vacuum()
    off_lines, off_archives = sizes()
    print(f"\n(b) {jobs:,} ended jobs of {lines:,} lines each")
    off = off_lines + off_archives - base
    print(f"  archiving off: log table {off_lines / MB:.1f} MiB {heap_and_indexes()},")
    print(f"    growth {off / MB:.1f} MiB, {off / (jobs * lines):.0f} B a line")
    started = time.perf_counter()
    for job in batch:
        assert logarchive.move_to_store(job_id=job.pk, run=1) is not None
    moved_s = time.perf_counter() - started
    vacuum()
    vacuum()  # a b-tree page emptied by one VACUUM is recycled by a later one
    total = sum(sizes())
    stored = sum(LogArchive.objects.values_list("size", flat=True))
    print(f"  archiving on, batch 1 moved in {moved_s:.1f} s ({jobs / moved_s:.0f} runs/s):")
    print(f"    log table {sizes()[0] / MB:.1f} MiB {heap_and_indexes()},")
    print(f"    archive table {sizes()[1] / MB:.2f} MiB;")
    print(f"    objects {stored / MB:.1f} MiB in S3 ({stored / jobs / 1024:.1f} KiB a run)")
    for n in range(2, batches + 1):
        for job in store_ended_jobs(jobs, lines, jobs * (n - 1)):
            logarchive.move_to_store(job_id=job.pk, run=1)
        vacuum()
        vacuum()
        now = sum(sizes())
        print(f"  archiving on, batch {n} stored and moved: log table {sizes()[0] / MB:.1f} MiB")
        print(f"    {heap_and_indexes()}, growth {(now - total) / MB:.2f} MiB this batch")
        total = now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument(
        "--updates", type=int, default=40, help="curve updates measured, median kept"
    )
    parser.add_argument("--batches", type=int, default=3, help="batches of --jobs archived")
    parser.add_argument("--no-curve", action="store_true", help="(b) only")
    args = parser.parse_args()
    from storage.embedded import start_embedded_s3

    print(f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs")
    work = Path(tempfile.mkdtemp(prefix="bench-logstore-"))
    s3 = start_embedded_s3(directory=work / "s3", log_path=work / "s3rver.log")
    config = s3.config(alias="LOCAL")
    os.environ.update(
        {
            "S3_ENDPOINT_URL": config.endpoint_url,
            "S3_ALIAS": "LOCAL",
            "S3_ACCESS_KEY": config.access_key,
            "S3_SECRET_KEY": config.secret_key,
            "S3_REGION": config.region,
        }
    )
    try:
        fresh_database(flush_redis=True)
        import django

        django.setup()
        print("(a) one curve update (one new point), median of", args.updates)
        for points in () if args.no_curve else (2000, 10_000):
            r = curve_update(points, args.updates)
            print(
                f"  {points:>6,} points stored: before (JSON list rewritten)"
                f" {r['old_wal'] / 1024:.1f} KiB WAL,"
                f" {r['old_ms']:.2f} ms; after (a row appended) {r['new_wal'] / 1024:.2f} KiB WAL,"
                f" {r['new_ms']:.2f} ms; {r['old_wal'] / r['new_wal']:.0f}x less WAL"
            )
        log_growth(args.jobs, args.lines, args.batches)
    finally:
        s3.stop()
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
