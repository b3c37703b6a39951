"""Load: browsing members and job submissions against the production server setup, with locust.

`--users` signed-in members (default 100) browse their project's pages (job list, job detail,
buckets, notebooks, the project dashboard and home) and follow running jobs' logs as the job page
polls them, while 30 API clients submit 10 jobs per second in total, for `--duration` seconds
(default 300), headless, on loopback. Prints per page: requests, failures, p50, p95, and the
throughput; and the CPU each process took.

    .venv/bin/python bench/bench_load.py [--duration 300] [--users 100] [--streams] [--pin 0]

With `--streams` the pages stream instead of polling (issue 27): an events server (uvicorn
serving controlpanel.asgi, as k8s/events.yaml runs it) beside gunicorn, STREAMS_URL set, and
each member holds their project's stream and, on a running job's page, the job's stream
(bench/locustfile.py says how). `BENCH_LOAD_DATABASE` and `BENCH_LOAD_REDIS_DB` name another
database and Redis database than the defaults below. `--pin 0` keeps the emulator's CPU apart:
the panel's processes on CPU 0, the emulator, the feeder and locust on the others (PostgreSQL
and Redis unpinned).

The server is run as the production image runs it: gunicorn with k8s/web.yaml's command
(3 workers x 8 threads, access log), the Celery worker and notifier of k8s/worker.yaml, beat and
the watcher, `DEBUG=0` and collected static files, against the Kubernetes emulator of the tests
(in this process; a feeder prints two lines a second into each followed job's pod).
PostgreSQL database `ajuste_bench_load` (recreated) and Redis database 11 on loopback. locust
runs in its own process (bench/locustfile.py; gevent must not patch this one).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_jobs
from _panel import (
    CELERY,
    REPO,
    WATCHER,
    configure,
    cpu_seconds,
    free_port,
    fresh_database,
    gunicorn,
    pin_apart,
    start,
    stop,
    wait_http,
)

# The other benchmarks may run at the same time: a database and a Redis database of its own.
configure(
    os.environ.get("BENCH_LOAD_DATABASE", "ajuste_bench_load"),
    int(os.environ.get("BENCH_LOAD_REDIS_DB", "11")),
    JOB_SWEEP_SECONDS="10",
)  # 10: the default
PROJECTS = 4
FINISHED_JOBS = 300  # per project, with LOG_LINES lines each
LOG_LINES = 200
NOTEBOOKS = 10  # per project
LIVE_JOBS = 2  # per project, followed by the browsers; fed FEED_PER_S lines a second each
FEED_PER_S = 2
SUBMITTERS = 30  # bench/locustfile.py Submitter.fixed_count (10 jobs/s in all)


def seed(users: int) -> tuple[list[dict[str, Any]], list[dict[str, str]], dict[str, Any]]:
    """Projects with members (managers: the dashboard is theirs), finished jobs with their
    archived logs, stopped notebooks; a session per member and a token per submitter."""
    import django

    django.setup()
    from django.conf import settings
    from django.test import Client

    from controlpanel.accounts.models import User
    from controlpanel.accounts.services import token_create
    from controlpanel.engine.models import JobLogLine, Kind, Workload
    from controlpanel.flavors.models import Flavor
    from controlpanel.jobs.states import JobState
    from controlpanel.projects.models import Membership, Project

    flavor = Flavor.objects.get(name="h100-1-gpu")
    members: list[dict[str, Any]] = []
    tokens: list[dict[str, str]] = []
    projects = {}
    for p in range(PROJECTS):
        project = Project.objects.create(
            slug=f"load-{p}",
            name=f"Load {p}",
            gpu_quota=1_000_000,
            cpu_quota=0,  # 0: no limit
            memory_gib_quota=0,
            pod_quota=0,
            storage_gib_quota=0,
        )
        projects[project.slug] = project
        owner = User.objects.create_user(f"owner{p}", password="bench-password-123")  # noqa: S106
        Membership.objects.create(project=project, user=owner, role="manager")
        rows = Workload.objects.bulk_create(
            Workload(
                project=project,
                owner=owner,
                kind=Kind.JOB,
                name=f"train-{i}",
                image="registry.example.com/train:1",
                command=["python", "train.py", "--epochs", "3"],
                flavor=flavor,
                state=JobState.DONE if i % 5 else JobState.FAILED,
                launched_run=1,
                exit_code=0 if i % 5 else 1,
                log_lines=LOG_LINES,
                logs_archived=True,
            )
            for i in range(FINISHED_JOBS)
        )
        JobLogLine.objects.bulk_create(
            (
                JobLogLine(job=job, run=1, seq=s, text=f"step {s * 10} loss {2.0 / s:.4f}")
                for job in rows
                for s in range(1, LOG_LINES + 1)
            ),
            batch_size=5000,
        )
        Workload.objects.bulk_create(
            Workload(
                project=project,
                owner=owner,
                kind=Kind.NOTEBOOK,
                name=f"notebook-{i}",
                image="quay.io/jupyter/pytorch-notebook:latest",
                flavor=flavor,
                state=JobState.INTERRUPTED,
                launched_run=1,
            )
            for i in range(NOTEBOOKS)
        )
        jobs = [str(job.pk) for job in rows[:50]]
        for _ in range(users // PROJECTS + (p < users % PROJECTS)):
            index = len(members)
            user = User.objects.create_user(f"member{index}", password="bench-password-123")  # noqa: S106
            Membership.objects.create(project=project, user=user, role="manager")
            client = Client()
            client.force_login(user)
            members.append(
                {
                    "project": project.slug,
                    "cookie": client.cookies[settings.SESSION_COOKIE_NAME].value,
                    "jobs": jobs,
                    "live": [],
                }
            )
    for index in range(SUBMITTERS):
        slug = f"load-{index % PROJECTS}"
        user = User.objects.get(username=f"owner{index % PROJECTS}")
        tokens.append({"project": slug, "token": token_create(user=user, name=f"load-{index}")[1]})
    return members, tokens, projects


def start_live_jobs(
    base: str, tokens: list[dict[str, str]], cluster: Any, members: list[dict[str, Any]]
) -> list[tuple[str, str]]:
    """LIVE_JOBS running jobs per project, submitted through the API; their pods run."""
    import httpx

    pods = []
    for p in range(PROJECTS):
        token = tokens[p]
        http = httpx.Client(
            base_url=base,
            timeout=30,
            headers={
                "Authorization": f"Bearer {token['token']}",
                "X-Ajuste-Project": token["project"],
            },
        )
        ids = [bench_jobs.submit(http, 100 + i)[0] for i in range(LIVE_JOBS)]
        for member in members:
            if member["project"] == token["project"]:
                member["live"] = ids
        namespace = f"ajuste-{token['project']}"
        deadline = time.monotonic() + 60
        for job_id in ids:
            while True:
                found = [
                    pod["metadata"]["name"]
                    for pod in cluster.list("pods", namespace)
                    if pod["metadata"]["labels"].get("ajuste.io/id") == job_id
                ]
                if found:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"no pod for live job {job_id}")
                time.sleep(0.1)
            cluster.kubelet.run(namespace, found[0])
            cluster.kubelet.log(namespace, found[0], *(f"warm-up line {i}" for i in range(100)))
            pods.append((namespace, found[0]))
    return pods


def feed(cluster: Any, pods: list[tuple[str, str]], stop: threading.Event) -> None:
    step = 0
    while not stop.wait(1 / FEED_PER_S):
        step += 1
        for namespace, pod in pods:
            cluster.kubelet.log(namespace, pod, f"step {step} loss {1.0 / step:.5f}")


def queue_worker(queue: str, concurrency: int, *more: str) -> list[str]:
    """A Celery worker of `queue`, as k8s/worker.yaml runs it."""
    return [
        *CELERY,
        "worker",
        "-Q",
        queue,
        *more,
        "--loglevel=INFO",
        f"--concurrency={concurrency}",
        "--without-gossip",
        "--without-mingle",
    ]


def start_processes(
    kubeconfig: str, port: int, logs: Path, events: int = 0
) -> list[subprocess.Popen[bytes]]:
    """The panel's processes as the manifests run them (k8s/web.yaml, worker.yaml, beat.yaml,
    watcher.yaml; with `events`, k8s/events.yaml's uvicorn on that port), bound to loopback."""
    commands = {
        "web": gunicorn(port, 3, "--access-logfile", "-", "--timeout", "120"),
        "worker": queue_worker("celery", 4),
        "notifier": queue_worker("notifications", 2, "-n", "notifier@%h"),
        "beat": [
            *CELERY,
            "beat",
            "--loglevel=INFO",
            "--schedule",
            str(logs / "celerybeat-schedule"),
        ],
        "watcher": WATCHER,
    }
    env = {"KUBECONFIG": kubeconfig}  # the emulator's token
    if events:
        commands["events"] = [
            *(sys.executable, "-m", "uvicorn", "controlpanel.asgi:application"),
            *("--host", "127.0.0.1", "--port", str(events), "--no-access-log"),
            *("--timeout-graceful-shutdown", "3"),
        ]
        env |= {
            "STREAMS_URL": f"http://127.0.0.1:{events}",
            "STREAMS_ALLOWED_ORIGINS": f"http://127.0.0.1:{port}",
        }
    return start(commands, logs, **env)


def report(prefix: Path, duration: float) -> dict[str, Any]:
    rows = list(csv.DictReader((prefix.parent / f"{prefix.name}_stats.csv").open()))
    print(f"{'page':<28} {'requests':>9} {'failures':>9} {'p50 ms':>7} {'p95 ms':>7} {'req/s':>7}")
    for row in rows:
        print(
            f"{row['Name'] or row['Type']:<28} {row['Request Count']:>9} {row['Failure Count']:>9} "
            f"{row['50%']:>7} {row['95%']:>7} {float(row['Requests/s']):>7.1f}"
        )
    failures = list(csv.DictReader((prefix.parent / f"{prefix.name}_failures.csv").open()))
    for row in failures[:20]:
        print(f"  failure: {row['Occurrences']} x {row['Method']} {row['Name']}: {row['Error']}")
    total = next(row for row in rows if row["Name"] == "Aggregated")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=300, help="seconds of load (300)")
    parser.add_argument("--users", type=int, default=100, help="browsing members (100)")
    parser.add_argument(
        "--streams", action="store_true", help="pages hold streams (an events server) and poll not"
    )
    parser.add_argument(
        "--pin",
        default="",
        help="CPUs for the panel's processes, e.g. 0; the emulator, the log feeder and locust get "
        "the others (they stand in for a cluster and browsers that are elsewhere)",
    )
    parser.add_argument(
        "--costs-only",
        action="store_true",
        help="only each page's CPU and queries per request, on the database the last run left",
    )
    args = parser.parse_args()
    if args.costs_only:
        return page_costs()
    import psutil

    from tests.fixtures.k8s_emulator import EmulatedCluster

    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # the emulator's request log

    # SIGTERM must stop the panel's processes too (a worker left behind takes the next run's tasks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    started = time.monotonic()
    fresh_database(static=True, flush_redis=True)
    members, tokens, _ = seed(args.users)
    print(f"seeded in {time.monotonic() - started:.0f} s", flush=True)
    cluster = EmulatedCluster()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logs = Path(tempfile.mkdtemp(prefix="bench-load-"))
    events = free_port() if args.streams else 0
    procs = start_processes(cluster.kubeconfig, port, logs, events)
    feeding = threading.Event()
    try:
        wait_http(f"{base}/healthz")
        pods = start_live_jobs(base, tokens, cluster, members)
        threading.Thread(target=feed, args=(cluster, pods, feeding), daemon=True).start()
        config = logs / "load.json"
        config.write_text(
            json.dumps(
                {
                    "sessions": members,
                    "tokens": tokens,
                    "cookie_name": _cookie_name(),
                    "streams": f"http://127.0.0.1:{events}" if events else "",
                },
                indent=1,
            )
        )
        prefix = logs / "locust"
        locust = [
            str(Path(sys.executable).parent / "locust"),
            "-f",
            str(REPO / "bench" / "locustfile.py"),
            "--headless",
            "--host",
            base,
            "-u",
            str(args.users + SUBMITTERS),
            "-r",
            "20",
            "-t",
            f"{args.duration}s",
            "--csv",
            str(prefix),
            "--only-summary",
            "--stop-timeout",
            "60",  # let the requests in flight at the end answer
            "--loglevel",
            "WARNING",
        ]
        names = ["web", "worker", "notifier", "beat", "watcher"] + (["events"] if events else [])
        watched = {name: psutil.Process(proc.pid) for name, proc in zip(names, procs, strict=True)}
        if args.pin:
            print(pin_apart(watched, args.pin), flush=True)  # locust, started next: the rest
        watched["bench (emulator, feeder)"] = psutil.Process()
        load_before = os.getloadavg()
        cpu_before = cpu_seconds(watched)
        wall = time.monotonic()
        with (logs / "locust.log").open("wb") as out:
            runner = subprocess.Popen(
                locust,
                cwd=REPO,
                env=os.environ | {"AJUSTE_LOAD_CONFIG": str(config)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            watched["locust"] = psutil.Process(runner.pid)
            locust_cpu = 0.0
            while runner.poll() is None:
                try:
                    times = watched["locust"].cpu_times()
                    locust_cpu = times.user + times.system
                except psutil.NoSuchProcess:
                    break
                time.sleep(1)
        wall = time.monotonic() - wall
        cpu_after = cpu_seconds(watched)
        cpu_after["locust"], cpu_before["locust"] = locust_cpu, 0.0
        load_after = os.getloadavg()
        print(
            f"{args.users} browsing members + {SUBMITTERS} submitters for {args.duration} s, "
            f"{'pages streamed' if events else 'pages polling'} "
            f"(locust exit {runner.returncode}); load average before "
            f"{load_before[0]:.1f}, after {load_after[0]:.1f} (1-min), {load_after[2]:.1f} (15-min)"
        )
        total = report(prefix, args.duration)
        requests = int(total["Request Count"])
        failed = int(total["Failure Count"])
        print(
            f"total: {requests} requests, {failed} failures "
            f"({100 * failed / max(requests, 1):.2f} %), "
            f"{float(total['Requests/s']):.1f} requests/s"
        )
        share = ", ".join(
            f"{name} {(cpu_after[name] - cpu_before.get(name, 0.0)) / wall:.2f}"
            for name in cpu_after
        )
        print(f"CPU cores used on average over the {wall:.0f} s: {share}")
        from controlpanel.jobs.models import Job

        print(
            "jobs submitted by the load: "
            f"{Job.objects.filter(name__startswith='load-').count()}, of which with a pod "
            f"launched: {Job.objects.filter(name__startswith='load-', launched_run=1).count()}"
        )
    finally:
        feeding.set()
        stop(procs)
        cluster.close()
    print(f"(process logs and locust CSVs in {logs})")
    page_costs()


def page_costs(tries: int = 30) -> None:
    """CPU milliseconds (median of `tries`, this process) and database queries of one request to
    each page, through Django's test client on the database the load left: what the web
    process spends per request whatever else shares the machine."""
    import statistics

    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from controlpanel.accounts.models import User
    from controlpanel.jobs.models import Job
    from controlpanel.jobs.states import JobState
    from controlpanel.jobs.views import status_version

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(User.objects.get(username="member0"))
    project = "/p/load-0"
    done = Job.objects.filter(project__slug="load-0", state=JobState.DONE).first()
    live = Job.objects.filter(project__slug="load-0", name__startswith="bench-").first()
    assert done is not None and live is not None
    htmx = {"HTTP_HX_REQUEST": "true"}
    running = f"{project}/jobs/{live.pk}/"
    page = client.get(running).content.decode()
    status_url = re.search(r'id="job-status"[^>]* hx-get="([^"]+)"', page)
    assert status_url, "the running job's page has no status poller"
    logs = f"{running}logs/?run={live.run}&after="
    pages = {  # name: (url, headers, the answer expected)
        "job list": (f"{project}/jobs/", {}, 200),
        "job detail": (f"{project}/jobs/{done.pk}/", {}, 200),
        "job detail (running)": (running, {}, 200),
        "log poll, nothing new (204)": (f"{logs}{live.log_lines}", htmx, 204),
        "log poll, 5 new lines": (f"{logs}{max(live.log_lines - 5, 0)}", htmx, 200),
        "status poll, unchanged (204)": (status_url.group(1).replace("&amp;", "&"), htmx, 204),
        "status poll, changed": (f"{running}status/", htmx, 200),
        "bucket list": (f"{project}/buckets/", {}, 200),
        "notebook list": (f"{project}/notebooks/", {}, 200),
        "project dashboard": (f"{project}/dashboard/", {}, 200),
        "project home": (f"{project}/", {}, 200),
    }
    print(f"{'page':<28} {'CPU ms':>7} {'queries':>8} {'KiB':>6}")
    for name, (url, headers, expected) in pages.items():
        spent = []
        for _ in range(tries):
            if expected == 204 and "status" in name:
                # The version moves with a 10 s clock step too (STATUS_REFRESH_S): the page's
                # current one, read outside the timing, as a page that just swapped holds it.
                live.refresh_from_db()
                url = f"{running}status/?v={status_version(live, None)}"
            started = time.process_time()
            with CaptureQueriesContext(connection) as queries:
                response = client.get(url, **headers)
            spent.append((time.process_time() - started) * 1000)
            assert response.status_code == expected, (url, response.status_code)
        print(
            f"{name:<28} {statistics.median(spent):>7.1f} {len(queries):>8} "
            f"{len(response.content) / 1024:>6.1f}"
        )
    token = Job.objects.filter(name__startswith="load-").count()
    print(f"(jobs in the database: {Job.objects.count()}, of which submitted by the load: {token})")


def _cookie_name() -> str:
    from django.conf import settings

    return str(settings.SESSION_COOKIE_NAME)


if __name__ == "__main__":
    main()
