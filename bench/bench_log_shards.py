"""Log collection spread over watcher replicas (issue 26): N live workloads printing on the
Kubernetes emulator, `--watchers` `manage.py watch_workloads` processes (2 by default; 1 is the
single collector of before the scale-out) following their logs.

The emulator runs in a process of its own (this script with `--emulator`): it holds N running
Jobs and pods of project `alpha` and is their kubelet, printing one line per workload every
1/`--rate` s for `--seconds`, each line carrying its print time. This process starts the
watchers, listens to the stored-lines notices (streams/channels.py publishes them once the
batch committed) and prints:
- lines stored per second, and the lag from a line's print to its notice, p50/p95;
- the Kubernetes API requests per second the emulator answered;
- the rows written per second in the run's database (pg_stat_database);
- the WAL bytes per minute: the whole cluster's (pg_current_wal_lsn() before and after, so other
  sessions' writes on a shared server count too), and the run database's share, read back with
  pg_walinspect: the records whose block references name a relation of its database (its commit
  records name none and are left out, so the share is a little low);
- the CPU seconds of the watchers and of the emulator, kept apart (the emulator's kubelet
  and its `follow=true` streams are the cluster's cost, not the panel's).

    .venv/bin/python bench/bench_log_shards.py [--jobs N] [--rate R] [--seconds S] [--watchers W]

PostgreSQL database `ajuste_bench_shards` (recreated) and Redis database 10 (`BENCH_REDIS_DB`),
flushed. Each watcher holds its main thread's, its collector loop's and its `LOG_WRITERS`
writers' connections, whatever the number of logs: the figures end with the peak seen.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _panel
import bench_jobs  # configures its own run: this one's configure() comes after
from _panel import REPO, WATCHER, configure, nearest_rank, stop

DB_NAME = "ajuste_bench_shards"
NS = "ajuste-alpha"
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "10"))  # another, if a test run uses 10
configure(
    DB_NAME, REDIS_DB, COMPUTE_BACKEND="kubernetes", USER_CONTENT_DOMAIN="usercontent.example.net"
)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (and of its waited-for children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def emulator(args: argparse.Namespace) -> None:
    """The cluster's process: N running workloads, then the kubelet printing on `go`."""
    import django

    django.setup()
    from controlpanel.engine import backend as job_backend
    from controlpanel.engine.backend import project_request
    from controlpanel.jobs.models import Job
    from controlpanel.jobs.request import job_request
    from controlpanel.projects.models import Project
    from deploy.kubernetes.backend import KubernetesBackend
    from deploy.manifests import make_job
    from tests.fixtures.k8s_emulator import EmulatedCluster

    cluster = EmulatedCluster()
    job_backend.set_backend(KubernetesBackend(api_client=cluster.api_client()))
    job_backend.get_backend().ensure_project(project=project_request(Project.objects.get()))
    on_change, cluster.store.on_change = cluster.store.on_change, lambda: None
    pods = []
    for job in Job.objects.select_related("project", "flavor"):
        created = cluster.store.create("jobs", NS, make_job(job=job_request(job)))
        pods.append(
            cluster.store.create("pods", NS, bench_jobs.running_pod(cluster, created))["metadata"]
        )
    cluster.store.on_change = on_change
    out = Path(args.emulator)
    (out / "kubeconfig").write_text(Path(cluster.kubeconfig).read_text())
    go = out / "go"
    while not go.exists():
        time.sleep(0.1)
    requests_before, cpu_before = len(cluster.requests()), time.process_time()
    started = time.monotonic()
    period, n = 1 / args.rate, 0
    while time.monotonic() - started < args.seconds:
        n += 1
        for pod in pods:
            cluster.kubelet.log(NS, pod["name"], f"p={time.time():.6f} line {n}")
        time.sleep(max(0.0, started + n * period - time.monotonic()))
    printed_s = time.monotonic() - started
    (out / "printed.json").write_text(json.dumps({"lines": n * len(pods), "seconds": printed_s}))
    while not (out / "drained").exists():
        time.sleep(0.1)
    report = {
        "requests": len(cluster.requests()) - requests_before,
        "cpu": time.process_time() - cpu_before,
    }
    (out / "emulator.json").write_text(json.dumps(report))
    signal.pause()


class Notices(threading.Thread):
    """The stored-lines notices of every workload: each line's lag from its print time."""

    def __init__(self, prefix: str) -> None:
        super().__init__(daemon=True, name="notices")
        import redis

        self.pubsub = redis.Redis.from_url(os.environ["REDIS_URL"]).pubsub()
        self.pubsub.psubscribe(f"{prefix}:stream:workload:*")
        self.lags: list[float] = []
        self.lines = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            message = self.pubsub.get_message(timeout=0.5)
            if not message or message["type"] != "pmessage":
                continue
            now, body = time.time(), json.loads(message["data"])
            if body.get("t") != "lines":
                continue
            self.lines += body["last"] - body["first"] + 1
            for text in body.get("lines") or []:
                if text.startswith("p="):
                    self.lags.append(now - float(text[2:].split(" ", 1)[0]))


def rows_written() -> int:
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        row = conn.execute(
            "SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database"
            " WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def wal_lsn() -> str:
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]


def wal_bytes(start: str, end: str) -> tuple[int, int | None]:
    """The cluster's WAL bytes from `start` to `end`, and this database's share (None when
    pg_walinspect cannot read the range back, e.g. its segments were recycled)."""
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        total = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (end, start)).fetchone()
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            own = conn.execute(
                "SELECT coalesce(sum(record_length), 0) FROM pg_get_wal_records_info(%s, %s)"
                " WHERE block_ref ~ ('rel [0-9]+/' || (SELECT oid FROM pg_database"
                " WHERE datname = current_database()) || '/')",
                (start, end),
            ).fetchone()
        except psycopg.Error as error:
            print(f"(the database's WAL share could not be read back: {error})".strip())
            own = None
    return int(total[0]) if total else 0, int(own[0]) if own else None


class Connections(threading.Thread):
    """The peak PostgreSQL connections of each watcher (by application_name, PGAPPNAME)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(daemon=True, name="connections")
        self.peak = dict.fromkeys(names, 0)
        self.stop = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            while not self.stop.wait(0.5):
                rows = conn.execute(
                    "SELECT application_name, count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() GROUP BY 1"
                ).fetchall()
                for name, count in rows:
                    if name in self.peak:
                        self.peak[name] = max(self.peak[name], int(count))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1.0, help="lines/s of each workload")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--watchers", type=int, default=2, help="watcher replicas (1: before)")
    parser.add_argument("--emulator", help=argparse.SUPPRESS)  # the emulator's process
    args = parser.parse_args()
    if args.emulator:
        return emulator(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    _panel.fresh_database(flush_redis=True)
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from controlpanel.flavors.models import Flavor
    from controlpanel.jobs.models import Job
    from controlpanel.jobs.states import JobState

    project, _ = bench_jobs.setup_panel()
    owner = get_user_model().objects.get(username="owner")
    flavor = Flavor.objects.get(name="h100-1-gpu")
    Job.objects.bulk_create(
        Job(
            project=project,
            owner=owner,
            name=f"print-{i}",
            image="x/y:1",
            flavor=flavor,
            state=JobState.RUNNING,
            launched_run=1,
            admitted_at=project.created_at,
        )
        for i in range(args.jobs)
    )
    work = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    procs = _panel.start(
        {"emulator": [sys.executable, __file__, "--emulator", str(work), *_passed(args)]}, work
    )
    try:
        _wait(lambda: (work / "kubeconfig").exists(), 300, "the emulator's workloads", work)
        env = {"KUBECONFIG": str(work / "kubeconfig")}
        names = [f"watcher-{chr(ord('a') + i)}" for i in range(args.watchers)]
        watchers = [
            _panel.start({name: WATCHER}, work, HOSTNAME=name, PGAPPNAME=name, **env)[0]
            for name in names
        ]
        held = Connections(names)
        held.start()
        procs += watchers
        import redis

        shards = redis.Redis.from_url(os.environ["REDIS_URL"])
        key = f"{settings.REDIS_KEY_PREFIX}:log-shards"
        _wait(lambda: shards.zcard(key) == args.watchers, 120, "every watcher collecting", work)
        time.sleep(5)  # every log opened
        notices = Notices(settings.REDIS_KEY_PREFIX)
        notices.start()
        cpu = [cpu_seconds(p.pid) for p in watchers]
        rows, wal_start, load_start = rows_written(), wal_lsn(), os.getloadavg()[0]
        (work / "go").touch()
        _wait(lambda: (work / "printed.json").exists(), args.seconds + 600, "the prints", work)
        printed = json.loads((work / "printed.json").read_text())
        _wait(lambda: notices.lines >= printed["lines"], 60, "every line stored", work)
        window = printed["seconds"]
        cpu = [cpu_seconds(p.pid) - before for p, before in zip(watchers, cpu, strict=True)]
        rows, wal_end = rows_written() - rows, wal_lsn()
        (work / "drained").touch()
        _wait(lambda: (work / "emulator.json").exists(), 30, "the emulator's figures", work)
        emu = json.loads((work / "emulator.json").read_text())
    finally:
        stop(procs, grace=5)
    lags = notices.lags
    wal_total, wal_own = wal_bytes(wal_start, wal_end)
    print(
        f"{args.jobs} workloads printing {args.rate:g} line/s each for {window:.0f} s, "
        f"{args.watchers} watcher replica(s): {printed['lines']} lines printed, "
        f"{notices.lines} stored (load average {load_start:.1f} at the start)"
    )
    print(f"lines stored: {notices.lines / window:.0f} lines/s")
    print(
        f"lag print -> stored: p50 {nearest_rank(lags, 50):.2f} s, "
        f"p95 {nearest_rank(lags, 95):.2f} s, max {max(lags):.2f} s ({len(lags)} lines)"
    )
    print(f"Kubernetes API requests: {emu['requests'] / window:.1f}/s")
    print(f"PostgreSQL rows written: {rows / window:.0f}/s")
    per_minute = 60 / window
    print(
        f"WAL written: {wal_total * per_minute / 2**20:.1f} MiB/min, the whole cluster's (other"
        " sessions' writes count too); this database's share: "
        + (f"{wal_own * per_minute / 2**20:.1f} MiB/min" if wal_own is not None else "unknown")
    )
    print(
        "CPU seconds over the window: watchers " + " + ".join(f"{c:.1f}" for c in cpu) + f", "
        f"emulator {emu['cpu']:.1f} (kept apart; load average {os.getloadavg()[0]:.1f})"
    )
    print(
        "PostgreSQL connections held, peak: "
        + ", ".join(f"{name} {count}" for name, count in held.peak.items())
        + f" (LOG_WRITERS {settings.LOG_WRITERS} each)"
    )
    print(f"(process logs in {work})")


def _passed(args: argparse.Namespace) -> list[str]:
    return ["--jobs", str(args.jobs), "--rate", str(args.rate), "--seconds", str(args.seconds)]


def _wait(condition: Any, seconds: float, what: str, work: Path) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            sys.exit(f"not within {seconds:.0f} s: {what} (logs in {work})")
        time.sleep(0.2)


if __name__ == "__main__":
    os.chdir(REPO)
    main()
