"""What open streams cost the events server (uvicorn serving controlpanel.asgi): N streams of
one job held open by one user (its bearer token), the server's resident memory and CPU before
and after they open, over a quiet minute (heartbeats only), and while one line a second is
stored (each line goes to every stream); the server's threads and PostgreSQL connections.

    .venv/bin/python bench/bench_streams.py [--streams 1000] [--seconds 30]

PostgreSQL database `ajuste_bench_streams` (recreated) and Redis database 13. The clients run
in this process (aiohttp), so their CPU is not the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_jobs

bench_jobs.DB_NAME = "ajuste_bench_streams"
os.environ.update(
    {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{bench_jobs.DB_NAME}",
        "REDIS_URL": "redis://127.0.0.1:6379/13",
        "STREAMS_HEARTBEAT_SECONDS": "15",
    }
)


def usage(pid: int) -> tuple[float, float, int]:
    """(resident MiB, CPU seconds, threads) of the server process."""
    import psutil

    proc = psutil.Process(pid)
    times = proc.cpu_times()
    return proc.memory_info().rss / 2**20, times.user + times.system, proc.num_threads()


def db_connections() -> int:
    import psycopg

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres") as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (bench_jobs.DB_NAME,)
        ).fetchone()
    return int(row[0]) if row else 0


async def hold(url: str, token: str, count: int, seconds: float, store: object) -> list[str]:
    import aiohttp

    said: list[str] = []
    opened = asyncio.Event()
    ready = 0

    async def one(http: aiohttp.ClientSession) -> None:
        nonlocal ready
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as response:
            assert response.status == 200, await response.text()
            ready += 1
            if ready == count:
                opened.set()
            async for _ in response.content:
                pass

    connector = aiohttp.TCPConnector(limit=0)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:
        tasks = [asyncio.create_task(one(http)) for _ in range(count)]
        await asyncio.wait_for(opened.wait(), 300)
        return await measure_phases(said, seconds, store, tasks)


async def measure_phases(said: list[str], seconds: float, store: object, tasks: list) -> list[str]:
    pid = int(os.environ["BENCH_SERVER_PID"])
    base = usage(pid)
    said.append(f"open: {base[0]:.0f} MiB resident, {base[2]} threads, {db_connections()} DB conn")
    await asyncio.sleep(seconds)
    idle = usage(pid)
    said.append(f"idle {seconds:.0f} s: CPU {idle[1] - base[1]:.2f} s")
    for n in range(int(seconds)):
        await asyncio.to_thread(store, n)  # type: ignore[arg-type]
        await asyncio.sleep(1)
    busy = usage(pid)
    said.append(f"one line a second for {seconds:.0f} s: CPU {busy[1] - idle[1]:.2f} s")
    said.append(f"after: {busy[0]:.0f} MiB resident, {busy[2]} threads, {db_connections()} DB conn")
    for task in tasks:
        task.cancel()
    return said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    bench_jobs.fresh_database()
    project, token = bench_jobs.setup_panel()
    from django.db import transaction

    from controlpanel.engine import logs
    from controlpanel.engine.models import Workload
    from controlpanel.flavors.models import Flavor
    from controlpanel.jobs.models import Job

    owner = project.members.get()
    flavor = Flavor.objects.first()
    job = Job.objects.create(project=project, owner=owner, name="j", image="x/y:1", flavor=flavor)
    Job.objects.filter(pk=job.pk).update(state="RUNNING", launched_run=1)

    def store(n: int) -> None:
        with transaction.atomic():
            locked = Workload.objects.select_for_update(of=("self",)).get(pk=job.pk)
            logs._store(locked, [f"line {n}"])
            locked.save(update_fields=["log_lines", "progress", "curve_points", "updated_at"])

    port = bench_jobs.free_port()
    logdir = Path(tempfile.mkdtemp(prefix="bench-streams-"))
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "controlpanel.asgi:application"),
            *("--port", str(port), "--no-access-log"),
        ],
        env=os.environ | {"STREAMS_MAX_PER_USER": str(args.streams + 1)},
        stdout=(logdir / "events.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    os.environ["BENCH_SERVER_PID"] = str(server.pid)
    try:
        bench_jobs.wait_http(f"http://127.0.0.1:{port}/healthz")
        before = usage(server.pid)
        print(f"server started: {before[0]:.0f} MiB resident, {before[2]} threads")
        url = f"http://127.0.0.1:{port}/api/v1/jobs/{job.pk}/logs/stream/"
        started = time.perf_counter()
        said = asyncio.run(hold(url, token, args.streams, args.seconds, store))
        print(f"{args.streams} streams opened in {time.perf_counter() - started:.1f} s")
        print("\n".join(said))
    finally:
        server.terminate()
        server.wait(10)
    print(f"load average at the end (1, 5, 15 min): {os.getloadavg()}")


if __name__ == "__main__":
    main()
