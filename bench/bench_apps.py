"""App figures with the local backend (issue #16), through the real web, API, Celery worker,
beat and watcher processes (what `make run` starts), a fresh database and an embedded S3:

1. deploy → first answer: from `POST /api/v1/apps/` (the tiny demo Llama and a LoRA adapter
   from a project bucket) to the first successful chat completion through Ajuste's URL with
   the official `openai` client (polled every 100 ms; refusals while it starts are retried);
2. the path's overhead: chat completions (same prompts, max_tokens 8, CONCURRENCY threads, each
   with its own keep-alive connection) sent straight to the app's server on its loopback port
   and through Ajuste's proxy (`/a/<project>/<id>/v1/...`: token check, then the stream relayed),
   `--requests` each, in alternating rounds (so a busy neighbour weighs on both alike):
   requests per second, p50/p95 latency, and the proxy's extra time at p95 (goal ≤ 10 %).
   The panel's own figures for the app (app_stats: what its page shows) are printed beside.

    .venv/bin/python bench/bench_apps.py [--runs 3] [--requests 200] [--concurrency 4]

Uses PostgreSQL (database `ajuste_bench_apps`, recreated) and Redis database 10 on loopback
(keys under a prefix of this run). Percentiles are nearest-rank.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _panel import (
    CELERY,
    WATCHER,
    configure,
    free_port,
    fresh_database,
    gunicorn,
    start,
    stop,
    thread_worker,
    wait_http,
)
from _panel import nearest_rank as percentile

WORK = Path(tempfile.mkdtemp(prefix="bench-apps-"))
configure(
    "ajuste_bench_apps",
    10,
    REDIS_KEY_PREFIX=f"ajuste-bench-apps-{os.getpid()}",
    COMPUTE_BACKEND="local",
    AJUSTE_VAR_DIR=str(WORK / "var"),
    DJANGO_ALLOW_ASYNC_UNSAFE="true",
)
PROMPTS = [
    "Hello",
    "What is a GPU?",
    "Say something about fine-tuning.",
    "Tell me a short story.",
    "How are you today?",
    "Name a colour.",
    "What is an adapter?",
    "Count to three.",
]
MAX_TOKENS = 8
POLL_S = 0.1


def setup_panel(s3: Any) -> tuple[str, str]:
    """Django in this process; project `alpha`, its owner's token, a bucket holding the model
    and the adapter. Returns (token, bucket)."""
    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    from controlpanel.accounts.models import User
    from controlpanel.accounts.services import token_create
    from controlpanel.buckets.models import Bucket
    from controlpanel.projects.models import Membership, Project
    from storage.objects import create_bucket
    from storage.sync import push
    from storage.volumes import Mode, VolumeSpec

    project = Project.objects.create(slug="alpha", name="Alpha", gpu_quota=100)
    owner = User.objects.create_user("owner", password="bench-password-123")  # noqa: S106
    Membership.objects.create(project=project, user=owner, role="manager")
    create_bucket(s3, bucket="weights")
    Bucket.objects.create(project=project, datastore="LOCAL", name="weights")
    from tests.fixtures.apps import tiny_model_and_adapter

    model_dir, adapter_dir = tiny_model_and_adapter(WORK / "assets")
    for prefix, directory in (("tiny-llama", model_dir), ("runs/1/adapter", adapter_dir)):
        spec = VolumeSpec("weights", "LOCAL", prefix, "/workspace/x", Mode.RW)
        assert not push(s3, spec, directory).failed
    return token_create(user=owner, name="bench")[1], "weights"


def start_panel(port: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    commands = {
        "web": gunicorn(port, 2),
        "worker": thread_worker(4),
        "beat": [*CELERY, "beat", "-l", "WARNING", "--schedule", str(logs / "beat-schedule")],
        "watcher": WATCHER,
    }
    return start(commands, logs)


def deploy_to_first_answer(api: Any, token: str, bucket: str, index: int) -> tuple[str, float]:
    """POST the app, then ask it until it answers: (the app's id, seconds)."""
    import openai

    began = time.perf_counter()
    created = api.post(
        "/api/v1/apps/",
        json={
            "project": "alpha",
            "name": f"bench chat {index}",
            "model": f"{bucket}@LOCAL/tiny-llama",
            "adapter": f"{bucket}@LOCAL/runs/1/adapter",
            "model_name": "tiny-chat",
            "flavor": "ai1-1-cpu",
        },
    )
    created.raise_for_status()
    body = created.json()
    client = openai.OpenAI(base_url=body["url"], api_key=token, max_retries=0, timeout=30)
    give_up = time.monotonic() + 300
    while time.monotonic() < give_up:
        try:
            answer = client.chat.completions.create(
                model="tiny-chat", messages=[{"role": "user", "content": "Hello"}], max_tokens=1
            )
            if answer.choices:
                return str(body["id"]), time.perf_counter() - began
        except openai.APIStatusError as exc:
            if exc.status_code != 503:  # 503: not running yet
                raise
        except openai.APIConnectionError:
            pass
        time.sleep(POLL_S)
    raise SystemExit(f"app {body['id']} did not answer within 300 s")


def load(
    url: str, headers: dict[str, str], count: int, concurrency: int
) -> tuple[list[float], float]:
    """`count` chat completions on `concurrency` threads: (latencies, seconds for all)."""
    import httpx

    local = threading.local()
    lock = threading.Lock()
    issued = iter(range(count))

    def one(_: int) -> float:
        if not hasattr(local, "http"):
            local.http = httpx.Client(timeout=120, headers=headers, trust_env=False)
        with lock:
            index = next(issued)
        payload = {
            "model": "tiny-chat",
            "messages": [{"role": "user", "content": PROMPTS[index % len(PROMPTS)]}],
            "max_tokens": MAX_TOKENS,
        }
        began = time.perf_counter()
        answer = local.http.post(f"{url}/chat/completions", json=payload)
        seconds = time.perf_counter() - began
        answer.raise_for_status()
        assert answer.json()["choices"], answer.text
        return seconds

    began = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        latencies = list(pool.map(one, range(count)))
    return latencies, time.perf_counter() - began


def line(name: str, latencies: list[float], seconds: float) -> str:
    rate = len(latencies) / seconds
    p50, p95 = percentile(latencies, 50) * 1000, percentile(latencies, 95) * 1000
    mean = statistics.mean(latencies) * 1000
    return (
        f"{name:<26} {rate:6.1f} req/s   p50 {p50:6.1f} ms   p95 {p95:6.1f} ms"
        f"   mean {mean:6.1f} ms   (n={len(latencies)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="deploys timed")
    parser.add_argument("--requests", type=int, default=200, help="per path")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4, help="alternations direct/proxy")
    args = parser.parse_args()
    import httpx

    from storage.embedded import start_embedded_s3

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    print(f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs")
    s3 = start_embedded_s3(directory=WORK / "s3", log_path=WORK / "s3rver.log")
    config = s3.config(alias="LOCAL")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    os.environ.update(
        {
            "SITE_URL": base,
            "S3_ENDPOINT_URL": config.endpoint_url,
            "S3_ALIAS": "LOCAL",
            "S3_ACCESS_KEY": config.access_key,
            "S3_SECRET_KEY": config.secret_key,
            "S3_REGION": config.region,
        }
    )
    fresh_database()
    token, bucket = setup_panel(config)
    from controlpanel.engine.backend import get_backend, job_ref
    from controlpanel.served import stats as app_stats
    from controlpanel.served.models import App

    logs = WORK / "logs"
    logs.mkdir()
    procs = start_panel(port, logs)
    api = httpx.Client(
        base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}, trust_env=False
    )
    apps: list[str] = []
    try:
        wait_http(f"{base}/healthz")
        deploys = []
        for index in range(args.runs):
            app_id, seconds = deploy_to_first_answer(api, token, bucket, index)
            deploys.append(seconds)
            apps.append(app_id)
            print(f"deploy → first answer, run {index + 1}: {seconds:.2f} s", flush=True)
            if index < args.runs - 1:
                api.delete(f"/api/v1/apps/{app_id}/").raise_for_status()
        print(
            f"deploy → first answer: p50 {percentile(deploys, 50):.2f} s   "
            f"max {max(deploys):.2f} s   (n={len(deploys)})"
        )

        app = App.objects.get(pk=apps[-1])
        steps = [(e.state, e.at) for e in app.events.order_by("at", "pk")]
        print(
            "last deploy's timeline: "
            + ", ".join(
                f"{state} +{(at - app.created_at).total_seconds():.1f} s" for state, at in steps
            )
        )
        direct_url = f"{app.url}/v1"
        proxy_url = api.get(f"/api/v1/apps/{app.pk}/").json()["url"]
        auth = {"Authorization": f"Bearer {token}"}
        load(direct_url, {}, 8, args.concurrency)  # warm up both paths
        load(proxy_url, auth, 8, args.concurrency)
        direct: list[float] = []
        proxied: list[float] = []
        direct_s = proxied_s = 0.0
        per_round = max(1, args.requests // args.rounds)
        for _ in range(args.rounds):
            latencies, seconds = load(direct_url, {}, per_round, args.concurrency)
            direct += latencies
            direct_s += seconds
            latencies, seconds = load(proxy_url, auth, per_round, args.concurrency)
            proxied += latencies
            proxied_s += seconds
        print(f"chat completions, max_tokens {MAX_TOKENS}, {args.concurrency} threads:")
        print(line("direct (127.0.0.1 port)", direct, direct_s))
        print(line("through Ajuste's proxy", proxied, proxied_s))
        p95_direct, p95_proxy = percentile(direct, 95), percentile(proxied, 95)
        p50_direct, p50_proxy = percentile(direct, 50), percentile(proxied, 50)
        print(
            f"overhead of the path: p95 {(p95_proxy - p95_direct) * 1000:+.1f} ms "
            f"({(p95_proxy / p95_direct - 1) * 100:+.1f} %, goal ≤ 10 %), "
            f"p50 {(p50_proxy - p50_direct) * 1000:+.1f} ms "
            f"({(p50_proxy / p50_direct - 1) * 100:+.1f} %), "
            f"throughput {(len(proxied) / proxied_s) / (len(direct) / direct_s) * 100 - 100:+.1f} %"
        )
        figures = app_stats.figures(app_id=app.pk)
        if figures is not None:
            print(
                "the app's page (its last 5 min, with 8 warm-up requests and the first answer): "
                f"{figures.requests_5m} requests, {figures.errors_5m} errors, "
                f"p50 {figures.p50_text}, p95 {figures.p95_text}"
            )
        print(f"load average at end: {os.getloadavg()}")
    finally:
        for app_id in apps:
            api.delete(f"/api/v1/apps/{app_id}/")
        time.sleep(2)
        backend = get_backend()
        for app_id in apps:
            row = App.objects.filter(pk=app_id).first()
            if row is not None:
                backend.delete_app(ref=job_ref(row))
        stop(procs, grace=15, group=True)
        s3.stop()
        print(f"(process logs in {logs})")


if __name__ == "__main__":
    main()
