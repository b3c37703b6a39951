"""Job figures against the Kubernetes emulator, through the real web, API and Celery workers:

1. submit-to-pod-created latency (p50/p95), one job at a time through the REST API;
2. sustained submissions per second through the API (8 client threads), and how long until
   every one of their pods exists;
3. log latency: a line printed by the pod (the test kubelet) to the line visible in Chromium,
   p50/p95 (the page polls a self-replacing htmx fragment every second);
4. the reconcile sweep with 1,000 and 10,000 live jobs: first sweep (every job changed) and a
   steady-state sweep (nothing changed), and how it grows.

    .venv/bin/python bench/bench_jobs.py [--jobs 50] [--burst 50] [--skip-browser] [--sweep-only]
        [--pin 0]   (the panel on CPU 0, the emulator and the clients on the others)

Uses PostgreSQL (database `ajuste_bench`, recreated) and Redis database 14 on loopback;
BENCH_DB and BENCH_REDIS_DB pick others (so two runs can share the machine). `--sweep-sizes ""`
skips the sweep.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _panel
from _panel import (
    WATCHER,
    configure,
    cpu_seconds,
    free_port,
    gunicorn,
    pin_apart,
    stop,
    thread_worker,
    wait_http,
)
from _panel import start as start_processes

DB_NAME = os.environ.get("BENCH_DB", "ajuste_bench")
PANEL = ("web", "worker", "watcher")
NS = "ajuste-alpha"
configure(
    DB_NAME,
    int(os.environ.get("BENCH_REDIS_DB", "14")),
    COMPUTE_BACKEND="kubernetes",
    DJANGO_ALLOW_ASYNC_UNSAFE="true",
    JOB_SWEEP_SECONDS="5",
)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def fresh_database() -> None:
    _panel.fresh_database(static=True, flush_redis=True)


def setup_panel() -> tuple[Any, str]:
    """Django in this process; an owner of project `alpha` with a token."""
    import django

    django.setup()
    from controlpanel.accounts.models import User
    from controlpanel.accounts.services import token_create
    from controlpanel.projects.models import Membership, Project

    project = Project.objects.create(
        slug="alpha",
        name="Alpha",
        gpu_quota=100_000,
        cpu_quota=0,  # 0: no limit (thousands of jobs at once)
        memory_gib_quota=0,
        pod_quota=0,
        storage_gib_quota=0,
    )
    owner = User.objects.create_user("owner", password="bench-password-123")  # noqa: S106
    Membership.objects.create(project=project, user=owner, role="manager")
    return project, token_create(user=owner, name="bench")[1]


def start_panel(
    kubeconfig: str, port: int, logs: Path, extra: dict[str, list[str]] | None = None, **env: str
) -> list[subprocess.Popen[bytes]]:
    commands = dict(zip(PANEL, (gunicorn(port, 2), thread_worker(8), WATCHER), strict=True))
    # KUBECONFIG: the emulator's token
    return start_processes(commands | (extra or {}), logs, KUBECONFIG=kubeconfig, **env)


class PodClock:
    """Notes when each job's pod is created: a hook among the emulator's admission steps, so
    it costs nothing between creations (a thread scanning the store took CPU, and the GIL,
    from the emulator and the clients in this process)."""

    def __init__(self, cluster: Any) -> None:
        self.seen: dict[str, float] = {}
        cluster.store.admission.append(self._admit)

    def _admit(self, store: Any, plural: str, body: dict[str, Any]) -> None:
        if plural == "pods":
            job_id = (body["metadata"].get("labels") or {}).get("ajuste.io/id")
            if job_id:
                self.seen.setdefault(job_id, time.perf_counter())


def submit(http: Any, index: int) -> tuple[str, float]:
    started = time.perf_counter()
    response = http.post(
        "/api/v1/jobs/",
        json={
            "name": f"bench-{index}",
            "image": "registry.example.com/train:1",
            "command": ["python", "train.py"],
            "flavor": "h100-1-gpu",
            "gpu": 1,
        },
    )
    response.raise_for_status()
    return response.json()["id"], started


def wait_pods(clock: PodClock, ids: list[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(i in clock.seen for i in ids):
        time.sleep(0.01)
    missing = [i for i in ids if i not in clock.seen]
    if missing:
        from controlpanel.jobs.models import Job

        states = list(
            Job.objects.filter(pk__in=missing[:5]).values_list(
                "id", "state", "state_reason", "launched_run", "admitted_at"
            )
        )
        raise SystemExit(f"{len(missing)} pods never appeared: {states}")


def bench_latency(http: Any, clock: PodClock, count: int) -> None:
    latencies = []
    for index in range(count):
        job_id, started = submit(http, index)
        wait_pods(clock, [job_id], 30)
        latencies.append((clock.seen[job_id] - started) * 1000)
    print(
        f"submit-to-pod-created latency over {count} jobs: "
        f"p50 {percentile(latencies, 0.5):.0f} ms, p95 {percentile(latencies, 0.95):.0f} ms"
    )


def burst_clients(base: str, token: str, count: int) -> tuple[list[str], float, float]:
    """`count` submissions from 8 client threads (run in a process of its own: in this one
    the clients would share the GIL with the emulator): the jobs' ids, when the first was
    sent and when the last was answered (time.perf_counter: the same clock in every process
    on Linux)."""
    import httpx

    headers = {"Authorization": f"Bearer {token}", "X-Ajuste-Project": "alpha"}
    clients = [httpx.Client(base_url=base, timeout=30, headers=headers) for _ in range(8)]
    for http in clients:
        http.get("/api/v1/jobs/?page_size=1").raise_for_status()  # connected before the clock
    began = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda i: submit(clients[i % 8], 10_000 + i), range(count)))
    return [job_id for job_id, _ in done], began, time.perf_counter()


def bench_burst(
    base: str, token: str, clock: PodClock, count: int, panel: dict[str, Any] | None = None
) -> None:
    """`count` submissions from 8 client threads in their own process; with `panel` (name:
    psutil.Process), the CPU each process spent per job until every pod existed (the web's,
    the worker's... and this process's: the emulator)."""
    import multiprocessing

    import psutil

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pool.apply(time.sleep, (0,))  # the client process is up before the clock
        named = {**(panel or {}), "bench (emulator)": psutil.Process()}
        named |= {"clients": psutil.Process(pool._pool[0].pid)}
        before = cpu_seconds(named)
        ids, began, ended = pool.apply(burst_clients, (base, token, count))
        wait_pods(clock, ids, 600)
        spent = {name: used - before[name] for name, used in cpu_seconds(named).items()}
    created = max(clock.seen[job_id] for job_id in ids)
    print(
        f"sustained submissions through the API: {count / (ended - began):.1f} jobs/s "
        f"({count} jobs, 8 client threads in their own process); every pod created after "
        f"{created - began:.1f} s ({count / (created - began):.1f} pods/s end to end)"
    )
    if panel:
        per_job = {name: used * 1000 / count for name, used in spent.items()}
        print(
            "CPU per job, submit to pod: "
            + ", ".join(f"{n} {ms:.1f} ms" for n, ms in per_job.items())
        )
        ours = sum(ms for name, ms in per_job.items() if name in panel)
        print(
            f"the panel's processes: {ours:.1f} ms of CPU a job (PostgreSQL and Redis not "
            f"counted): at most {1000 / ours:.0f} jobs/s per core they have to themselves"
        )


def bench_log_latency(base: str, http: Any, cluster: Any, clock: PodClock, lines: int) -> None:
    from playwright.sync_api import sync_playwright

    from tests.fixtures.browser import CHROMIUM, CHROMIUM_ARGS

    job_id, _ = submit(http, 99_999)
    wait_pods(clock, [job_id], 30)
    pod = next(
        p["metadata"]["name"]
        for p in cluster.list("pods", NS)
        if p["metadata"]["labels"].get("ajuste.io/id") == job_id
    )
    cluster.kubelet.run(NS, pod)
    latencies = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(f"{base}/login/")
        page.fill("input[name=username]", "owner")
        page.fill("input[name=password]", "bench-password-123")
        page.click("button[type=submit]")
        page.goto(f"{base}/p/alpha/jobs/{job_id}/")
        page.wait_for_selector("#log-poller[hx-get]", state="attached")
        for index in range(lines):
            time.sleep(0.37)  # land at different points of the poll period
            marker = f"bench-line-{index}"
            printed = time.perf_counter()
            cluster.kubelet.log(NS, pod, marker)
            page.wait_for_selector(f"#log-lines .ln:text-is('{marker}')", timeout=30_000)
            latencies.append((time.perf_counter() - printed) * 1000)
        browser.close()
    print(
        f"log latency, line printed to line visible in Chromium ({lines} lines): "
        f"p50 {percentile(latencies, 0.5):.0f} ms, p95 {percentile(latencies, 0.95):.0f} ms"
    )


def bench_sweep(cluster: Any, project: Any, sizes: list[int]) -> None:
    from django.contrib.auth import get_user_model

    from controlpanel.engine import backend as job_backend
    from controlpanel.engine.backend import project_request
    from controlpanel.engine.models import JobLogLine
    from controlpanel.engine.tasks import sweep_now as sweep
    from controlpanel.flavors.models import Flavor
    from controlpanel.jobs.models import Job
    from controlpanel.jobs.request import job_request
    from controlpanel.jobs.states import JobState
    from deploy.kubernetes.backend import KubernetesBackend
    from deploy.manifests import make_job

    job_backend.set_backend(KubernetesBackend(api_client=cluster.api_client()))
    owner = get_user_model().objects.get(username="owner")
    flavor = Flavor.objects.get(name="h100-1-gpu")
    previous = None
    for size in sizes:
        JobLogLine.objects.all().delete()
        Job.objects.all().delete()
        cluster.reset()
        # The project's namespace, labelled as Ajuste's: the sweep trusts nothing outside one.
        job_backend.get_backend().ensure_project(project=project_request(project))
        jobs = Job.objects.bulk_create(
            Job(
                project=project,
                owner=owner,
                name=f"sweep-{i}",
                image="x/y:1",
                flavor=flavor,
                state=JobState.RUNNING,
                launched_run=1,
                admitted_at=project.created_at,
            )
            for i in range(size)
        )
        # Written straight into the store with the controllers paused: the emulated Job
        # controller rescans every pod on each change, which is quadratic at 10,000 jobs.
        on_change, cluster.store.on_change = cluster.store.on_change, lambda: None
        for job in Job.objects.select_related("project", "flavor").filter(
            pk__in=[j.pk for j in jobs]
        ):
            created = cluster.store.create("jobs", NS, make_job(job=job_request(job)))
            cluster.store.create("pods", NS, running_pod(cluster, created))
        cluster.store.on_change = on_change
        first = timed(sweep)
        steady = timed(sweep)
        growth = f", x{steady[0] / previous:.1f} for x{size // sizes[0]} jobs" if previous else ""
        previous = previous or steady[0]
        print(
            f"sweep with {size} live jobs: first {first[0]:.2f} s ({first[1]['changed']} "
            f"changed), steady state {steady[0]:.2f} s ({steady[1]['changed']} changed){growth}"
        )


def running_pod(cluster: Any, job: dict[str, Any]) -> dict[str, Any]:
    """The pod the Job controller would make for `job` (controlled by it: the sweep counts no
    other), already running on a node."""
    from tests.fixtures.k8s_emulator.store import stamp

    now = stamp(cluster.store.now())
    template = job["spec"]["template"]
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    labels = {
        **template["metadata"].get("labels", {}),
        "job-name": name,
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
    }
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}
    containers = template["spec"]["containers"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-p0",
            "namespace": NS,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": {**template["spec"], "nodeName": "gpu-node-1"},
        "status": {
            "phase": "Running",
            "startTime": now,
            "containerStatuses": [
                {"name": c["name"], "ready": True, "state": {"running": {"startedAt": now}}}
                for c in containers
            ],
        },
    }


def timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--log-lines", type=int, default=30)
    parser.add_argument("--sweep-sizes", default="1000,10000")
    parser.add_argument("--skip-browser", action="store_true")
    parser.add_argument("--sweep-only", action="store_true", help="Only the sweep figures.")
    parser.add_argument(
        "--pin",
        default="",
        help="CPUs for the panel's processes, e.g. 0 (web, worker, watcher); this process (the "
        "emulator and the clients) gets the others: the emulator stands in for a server "
        "that runs elsewhere",
    )
    args = parser.parse_args()
    import httpx
    import psutil

    from tests.fixtures.k8s_emulator import EmulatedCluster

    # SIGTERM must stop the worker, web and watcher too: a worker left behind would take the
    # next run's tasks (same broker database) and drive a cluster that no longer exists.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # the emulator's request log
    fresh_database()
    project, token = setup_panel()
    cluster = EmulatedCluster()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logs = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    if args.sweep_only:
        bench_sweep(cluster, project, [int(s) for s in args.sweep_sizes.split(",")])
        return cluster.close()
    procs = start_panel(cluster.kubeconfig, port, logs)
    panel = {name: psutil.Process(proc.pid) for name, proc in zip(PANEL, procs, strict=True)}
    if args.pin:
        print(pin_apart(panel, args.pin))
    clock = PodClock(cluster)
    try:
        wait_http(f"{base}/healthz")

        http = httpx.Client(
            base_url=base,
            timeout=30,
            headers={"Authorization": f"Bearer {token}", "X-Ajuste-Project": "alpha"},
        )
        submit(http, -1)  # warm up every process
        time.sleep(2)
        bench_latency(http, clock, args.jobs)
        bench_burst(base, token, clock, args.burst, panel)
        if not args.skip_browser:
            bench_log_latency(base, http, cluster, clock, args.log_lines)
    finally:
        stop(procs)
    bench_sweep(cluster, project, [int(s) for s in args.sweep_sizes.split(",") if s])
    cluster.close()
    print(f"(process logs in {logs})")


if __name__ == "__main__":
    main()
