"""Log latency with 1 and with 50 viewers of the same job, and what the viewers cost the cluster:

a line printed by the pod (the emulator's test kubelet) to the line visible in a real Chromium
tab, p50/p95, first with that tab alone, then with 49 more viewers of the same job; and the
Kubernetes API requests per second the emulator answered during each phase (they must not
grow with the viewers: pages read stored rows, one collector in the watcher reads the pod).

The 49 extra viewers are HTTP clients in a separate process that poll as the job page does
(the log poller's and the status block's URLs each once a second, answered 204 while nothing
changed, with the session of the Chromium viewer), or with `--tabs` 49 more Chromium tabs.

    .venv/bin/python bench/bench_logs.py [--lines 40] [--viewers 50] [--tabs] [--streams]

With `--streams` the pages stream (an events server, uvicorn, beside gunicorn; STREAMS_URL)
and the extra HTTP viewers each hold the page's stream instead of polling.

Runs the real gunicorn, Celery worker and watcher against the emulator (bench_jobs.py's
harness); PostgreSQL database `ajuste_bench_logs` (recreated) and Redis database 12.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_jobs

bench_jobs.DB_NAME = "ajuste_bench_logs"  # bench_jobs.py may run at the same time
os.environ.update(
    {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{bench_jobs.DB_NAME}",
        "REDIS_URL": "redis://127.0.0.1:6379/12",
    }
)
NS = bench_jobs.NS
percentile = bench_jobs.percentile


def _poll_url(html: bytes, element: str) -> str | None:
    """The URL the page's (or a fragment's) htmx poller `#element` asks; None once it stops."""
    found = re.search(rf'id="{element}"[^>]* hx-get="([^"]+)"'.encode(), html)
    return found.group(1).decode().replace("&amp;", "&") if found else None


async def _viewer(http: Any, page: str, stats: dict) -> None:
    """One job page, polled as the browser does: the log poller and the status block each ask
    their URL every second; a 204 (nothing new) keeps it, a 200 brings the next one."""
    async with http.get(page) as response:
        html = await response.read()

    async def poll(element: str) -> None:
        url = _poll_url(html, element)
        await asyncio.sleep(random.uniform(0, 1.0))  # pages opened at different moments
        while url:
            started = time.perf_counter()
            try:
                async with http.get(url) as response:
                    body = await response.read()
                if response.status == 200:
                    url = _poll_url(body, element)
                elif response.status != 204:
                    stats["errors"] += 1
            except Exception:
                stats["errors"] += 1
            stats["times"].append(time.perf_counter() - started)
            await asyncio.sleep(1.0)

    await asyncio.gather(poll("log-poller"), poll("job-status"))


async def _streamer(http: Any, url: str, stats: dict) -> None:
    """One job page that streams: its EventSource's connection, read as events come."""
    import aiohttp

    await asyncio.sleep(random.uniform(0, 1.0))
    try:
        forever = aiohttp.ClientTimeout(total=None)
        async with http.get(
            url, headers={"Accept": "text/event-stream"}, timeout=forever
        ) as response:
            if response.status != 200:
                stats["errors"] += 1
                return
            stats["times"].append(0.0)  # one stream held
            async for _ in response.content:
                stats["events"] = stats.get("events", 0) + 1
    except asyncio.CancelledError:
        raise
    except Exception:
        stats["errors"] += 1


async def _pollers(args: argparse.Namespace) -> None:
    import aiohttp  # lighter than httpx: the viewers should not eat the cores they measure

    stats: dict[str, Any] = {"times": [], "errors": 0}
    async with aiohttp.ClientSession(
        base_url=args.base,
        cookies={"sessionid": args.session},
        headers={"HX-Request": "true", "Referer": args.base + args.page},
        timeout=aiohttp.ClientTimeout(total=30),
        connector=aiohttp.TCPConnector(limit=2 * args.pollers),
    ) as http:
        if args.stream_url:
            views = [_streamer(http, args.stream_url, stats) for _ in range(args.pollers)]
        else:
            views = [_viewer(http, args.page, stats) for _ in range(args.pollers)]
        tasks = [asyncio.create_task(view) for view in views]
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        for task in tasks:
            task.cancel()
    times = [t * 1000 for t in stats["times"]] or [0.0]
    print(
        json.dumps(
            {
                "requests": len(stats["times"]),
                "errors": stats["errors"],
                "events": stats.get("events", 0),
                "p50_ms": percentile(times, 0.5),
                "p95_ms": percentile(times, 0.95),
            }
        ),
        flush=True,
    )


def wait_for(predicate: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def queries_per_poll(job_id: str, page: str) -> int:
    """Database queries one idle log poll makes (`logs/?run=R&after=N`, nothing new: 204;
    Django's test client, in process)."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from controlpanel.jobs.models import Job

    client = Client(HTTP_HOST="127.0.0.1", HTTP_HX_REQUEST="true")
    client.force_login(get_user_model().objects.get(username="owner"))
    job = Job.objects.get(pk=job_id)
    url = f"{page}logs/?run={job.run}&after={job.log_lines}"
    client.get(url)  # the session is read once, then as a poll is
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 204
    return len(captured.captured_queries)


# Notes in the page the moment each log line is inserted (a MutationObserver runs before the
# next paint), in wall-clock ms: Playwright's own wait polls every 500 ms after the first few
# tries, which would add up to half a second to the figure.
SEEN_JS = """() => {
  window.seen = {};
  new MutationObserver(() => {
    for (const el of document.querySelectorAll('#log-lines .ln:not([data-seen])')) {
      el.dataset.seen = '1';
      window.seen[el.textContent.trim()] = Date.now();
    }
  }).observe(document.getElementById('log-lines'), {childList: true, subtree: true});
}"""


def measure(page: Any, cluster: Any, pod: str, gaps: list[float], tag: str) -> dict[str, Any]:
    latencies = []
    started, calls = time.perf_counter(), cluster.request_count
    for index, gap in enumerate(gaps):
        time.sleep(gap)
        marker = f"{tag}-line-{index}"
        printed = time.time() * 1000
        cluster.kubelet.log(NS, pod, marker)
        page.wait_for_function(f"() => window.seen['{marker}']", timeout=30_000)
        latencies.append(page.evaluate(f"window.seen['{marker}']") - printed)
    seconds = time.perf_counter() - started
    made = cluster.emulator._requests[calls:]
    reads = sum(r.url.path.endswith("/log") for r in made)
    kinds = Counter(
        f"{getattr(r.method, 'value', r.method)} {re.sub(r'/namespaces/[^/]+', '', r.url.path)}"
        for r in made
    )
    return {
        "kinds": kinds.most_common(5),
        "log_reads_per_s": reads / seconds,
        "p50": percentile(latencies, 0.5),
        "p95": percentile(latencies, 0.95),
        "max": max(latencies),
        "api_per_s": (cluster.request_count - calls) / seconds,
        "seconds": seconds,
    }


def report(viewers: int, how: str, result: dict[str, Any], lines: int) -> None:
    print(
        f"log latency, {viewers} viewer{'s' * (viewers > 1)} ({how}), {lines} lines: "
        f"p50 {result['p50']:.0f} ms, p95 {result['p95']:.0f} ms, max {result['max']:.0f} ms; "
        f"Kubernetes API {result['api_per_s']:.2f} requests/s over {result['seconds']:.0f} s "
        f"({result['log_reads_per_s']:.2f}/s of them log reads)"
    )
    print("  the API requests:", ", ".join(f"{kind} ×{n}" for kind, n in result["kinds"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--tabs", action="store_true", help="The extra viewers as Chromium tabs.")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument(
        "--streams",
        action="store_true",
        help="Pages stream (an events server, uvicorn, and STREAMS_URL) instead of polling.",
    )
    parser.add_argument("--stream-url", help=argparse.SUPPRESS)
    # The poller process (started by the benchmark itself).
    parser.add_argument("--pollers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    parser.add_argument("--page", help=argparse.SUPPRESS)
    parser.add_argument("--session", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pollers is not None:
        return asyncio.run(_pollers(args))

    import httpx
    from playwright.sync_api import sync_playwright

    from tests.fixtures.browser import CHROMIUM, CHROMIUM_ARGS
    from tests.fixtures.k8s_emulator import EmulatedCluster

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    for noisy in ("aiohttp.access", "httpx"):  # the emulator's and the client's request lines
        logging.getLogger(noisy).setLevel(logging.WARNING)
    bench_jobs.fresh_database()
    _, token = bench_jobs.setup_panel()
    from controlpanel.jobs.models import Job
    from controlpanel.jobs.states import JobState

    cluster = EmulatedCluster()
    port = bench_jobs.free_port()
    base = f"http://127.0.0.1:{port}"
    logdir = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    extra: dict[str, list[str]] = {}
    env: dict[str, str] = {}
    if args.streams:
        events = bench_jobs.free_port()
        extra["events"] = [
            *(sys.executable, "-m", "uvicorn", "controlpanel.asgi:application"),
            *("--host", "127.0.0.1"),
            *("--port", str(events), "--no-access-log"),
        ]
        env = {"STREAMS_URL": f"http://127.0.0.1:{events}", "STREAMS_ALLOWED_ORIGINS": base}
        env["STREAMS_MAX_PER_USER"] = str(args.viewers + 10)  # one user, all the viewers
    procs = bench_jobs.start_panel(cluster.kubeconfig, port, logdir, extra, **env)
    pollers: subprocess.Popen[str] | None = None
    # Gaps between printed lines from 0.1 s to 3 s: lines land at every point of the page's poll
    # period and of the collector's back-off (0.25 s after a line, doubling up to 2 s when quiet).
    rng = random.Random(args.seed)
    gaps = [rng.uniform(0.1, 3.0) for _ in range(args.lines)]
    try:
        bench_jobs.wait_http(f"{base}/healthz")
        http = httpx.Client(
            base_url=base,
            timeout=30,
            headers={"Authorization": f"Bearer {token}", "X-Ajuste-Project": "alpha"},
        )
        job_id, _ = bench_jobs.submit(http, 1)
        pod = wait_for(
            lambda: next(
                (
                    p["metadata"]["name"]
                    for p in cluster.list("pods", NS)
                    if p["metadata"]["labels"].get("ajuste.io/id") == job_id
                ),
                None,
            ),
            30,
            "the pod",
        )
        cluster.kubelet.run(NS, pod)
        wait_for(lambda: Job.objects.get(pk=job_id).state == JobState.RUNNING, 30, "the job to run")
        cluster.kubelet.log(NS, pod, "warm-up")
        wait_for(lambda: Job.objects.get(pk=job_id).log_lines, 30, "the first stored line")
        page_path = f"/p/alpha/jobs/{job_id}/"
        queries = queries_per_poll(job_id, page_path)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{base}/login/")
            page.fill("input[name=username]", "owner")
            page.fill("input[name=password]", "bench-password-123")
            page.click("button[type=submit]")
            page.goto(base + page_path)
            page.wait_for_selector("#log-poller[hx-get]", state="attached")
            page.wait_for_selector("#log-lines .ln:text-is('warm-up')")
            if args.streams:
                page.wait_for_selector("#log-poller[data-stream=open]", state="attached")
            page.evaluate(SEEN_JS)
            time.sleep(3)
            alone = measure(page, cluster, pod, gaps, "one")
            extra = args.viewers - 1
            how = "1 Chromium tab alone"
            if args.tabs:
                how = f"1 measuring tab + {extra} more Chromium tabs, one browser"
                tabs = [context.new_page() for _ in range(extra)]
                for tab in tabs:
                    tab.goto(base + page_path)
                hidden = sum(tab.evaluate("document.visibilityState") != "visible" for tab in tabs)
                if hidden:
                    how += f" ({hidden} hidden: they do not poll)"
            elif extra:
                how = f"1 Chromium tab + {extra} HTTP viewers polling at the page's rate"
                stream = []
                if args.streams:
                    how = f"1 Chromium tab + {extra} HTTP viewers each holding the page's stream"
                    stream = [f"--stream-url={env['STREAMS_URL']}{page_path}events/?after=1"]
                session = next(c["value"] for c in context.cookies() if c["name"] == "sessionid")
                pollers = subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        f"--pollers={extra}",
                        f"--base={base}",
                        f"--page={page_path}",
                        f"--session={session}",
                        *stream,
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            time.sleep(5)  # every viewer polling
            crowd = measure(page, cluster, pod, gaps, "many")
            browser.close()
        served = None
        if pollers is not None:
            pollers.terminate()
            served = json.loads(pollers.communicate(timeout=30)[0].strip().splitlines()[-1])
            pollers = None
    finally:
        if pollers is not None:
            pollers.kill()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        cluster.close()
    if args.streams:
        print("pages streamed (the events server, uvicorn, STREAMS_URL)")
    report(1, "one Chromium tab", alone, args.lines)
    report(args.viewers, how, crowd, args.lines)
    if served:
        if args.streams:
            print(
                f"the HTTP viewers' streams: {served['requests']} held, {served['errors']} "
                f"errors, {served['events']} event lines read"
            )
        else:
            print(
                f"the HTTP viewers' polls: {served['requests']} answered, {served['errors']} "
                f"errors, p50 {served['p50_ms']:.0f} ms, p95 {served['p95_ms']:.0f} ms"
            )
    print(f"database queries per log poll: {queries}")
    print(f"load average at the end (1, 5, 15 min): {os.getloadavg()}")
    print(f"(process logs in {logdir})")


if __name__ == "__main__":
    main()
