"""What the benchmarks that run the panel share: a run's environment (its own PostgreSQL and
Redis databases on loopback, `DEBUG=0`), a fresh database, the panel's processes (gunicorn, the
Celery worker, beat, the watcher) started with a log each and stopped, waiting for the web.

    from _panel import REPO, configure, fresh_database, ...   (bench/ is on sys.path)

Importing it puts the repository on `sys.path`, so `controlpanel` and `tests` import."""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BIN = Path(sys.executable).parent
CELERY = [str(BIN / "celery"), "-A", "controlpanel"]
WATCHER = [sys.executable, "manage.py", "watch_workloads"]


def configure(database: str, redis_db: int, **more: str) -> None:
    """The environment of a run on the database `database` and Redis database `redis_db`
    (Django's settings read it), with `more` on top."""
    os.environ.update(
        {
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{database}",
            "REDIS_URL": f"redis://127.0.0.1:6379/{redis_db}",
            "DEBUG": "0",
            "HTTPS": "0",
            "SECRET_KEY": "bench-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "STATIC_MANIFEST": "0",
            "DJANGO_SETTINGS_MODULE": "controlpanel.settings",
            # Notebooks and apps need their own origin (system check ajuste.E110 stops migrate).
            "USER_CONTENT_DOMAIN": "usercontent.example.test",
        }
        | more
    )


def fresh_database(*, static: bool = False, flush_redis: bool = False) -> None:
    """The run's database (`DATABASE_URL`) dropped, created and migrated; with `static`, the
    static files collected (with DEBUG=0 a page has no htmx without them); with `flush_redis`,
    the run's Redis database emptied."""
    import psycopg

    name = os.environ["DATABASE_URL"].rsplit("/", 1)[1]
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO, check=True)
    if static:
        subprocess.run(
            [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
            cwd=REPO,
            check=True,
        )
    if flush_redis:
        import redis

        redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nearest_rank(values: list[float], pct: float) -> float:
    """The `pct` percentile, nearest-rank (p95 of 10 values is the largest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def gunicorn(port: int, workers: int, *more: str) -> list[str]:
    """The web process on 127.0.0.1:`port`: `workers` x 8 threads, keep-alive 75 s."""
    return [
        str(BIN / "gunicorn"),
        "controlpanel.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        "8",
        *more,
        "--keep-alive",
        "75",
    ]


def thread_worker(concurrency: int) -> list[str]:
    """A Celery worker of `concurrency` threads, warnings only."""
    return [
        *CELERY,
        "worker",
        "--pool=threads",
        f"--concurrency={concurrency}",
        "--without-gossip",
        "--without-mingle",
        "-l",
        "WARNING",
    ]


def start(commands: dict[str, list[str]], logs: Path, **env: str) -> list[subprocess.Popen[bytes]]:
    """Each command in its own session, in the repository, its output in `logs/<name>.log`,
    with this environment and `env` on top."""
    procs = []
    for name, argv in commands.items():
        out = (logs / f"{name}.log").open("wb")
        procs.append(
            subprocess.Popen(
                argv,
                cwd=REPO,
                env=os.environ | {"PYTHONUNBUFFERED": "1"} | env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return procs


def stop(procs: list[subprocess.Popen[bytes]], grace: float = 10, group: bool = False) -> None:
    """SIGTERM, then SIGKILL for what is still there after `grace` seconds; to each process's
    whole group (its children too) with `group`."""
    for proc in procs:
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()


def wait_http(url: str, seconds: float = 60) -> None:
    """Until `url` answers 200 (else exit, saying so)."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer")


def cpu_seconds(procs: dict[str, Any]) -> dict[str, float]:
    """CPU seconds (user + system) of each named process (psutil.Process) and its children so
    far; this process's own without its children (the panel's processes it started, counted
    under their own names: counting them here too made the emulator look 4 times busier)."""
    import psutil

    result = {}
    for name, proc in procs.items():
        total = 0.0
        try:
            mine = proc.pid == os.getpid()
            for one in [proc, *([] if mine else proc.children(recursive=True))]:
                times = one.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
        result[name] = total
    return result


def pin_apart(panel: dict[str, Any], cpus: str) -> str:
    """The panel's processes (psutil.Process; the forks they make later inherit it) on `cpus`
    ("0" or "0,1"), this process (the emulator standing in for a Kubernetes API server that
    runs elsewhere, and the clients) and what it starts later on the others. Returns what
    to print. PostgreSQL and Redis are not pinned."""
    mine = sorted({int(cpu) for cpu in cpus.split(",")})
    for proc in panel.values():
        for one in [proc, *proc.children(recursive=True)]:
            one.cpu_affinity(mine)
    rest = set(range(os.cpu_count() or 1)) - set(mine)
    os.sched_setaffinity(0, rest)
    return f"pinned: the panel on CPU {mine}, the emulator and the clients on CPU {sorted(rest)}"
