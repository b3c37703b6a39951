"""The API under `make run` from outside (issue 27's probe): p50/p95 of API reads by 30
readers, first alone, then while a client submits the demo fine-tune once a second.

    .venv/bin/python bench/bench_make_run_api.py [--seconds 60] [--readers 30]

`make run` (`python -m controlpanel.run`, its own var/ under a temporary folder, free ports) as
a person runs it: SQLite, the embedded Redis and object store, the local backend. Once the demo
bucket is filled, 31 members of the demo project get an API token each (`manage.py shell`, the
same var/): one per reader and one for the submitter, as 31 people. Each reader asks, in turn,
for the job list, the bucket list and the newest submitted job, then waits a second (closed
loop: 60-90 requests/s in all while the answers are fast). The submitter POSTs the demo fine-
tune (the form's pre-filled values, each with its own output folder) once a second; the local
backend queues them and runs them on this machine's CPUs, so their training shares the machine
with the panel, as it would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_make_run import ROOT, _answers, _free

# Run in make run's var/ by manage.py: a member of the demo project, a token, the demo form.
SETUP = """
import json, time
from controlpanel.accounts.models import User
from controlpanel.accounts.services import token_create
from controlpanel.buckets.models import Bucket
from controlpanel.jobs.demo import DEMO_FORM, demo_form_initial
from controlpanel.jobs.presets import DATA_PATH, MODEL_PATH, OUTPUT_PATH
from controlpanel.projects.models import Membership, Project
deadline = time.monotonic() + 300
while not Bucket.objects.filter(project__slug="demo", name="demo").exists():
    assert time.monotonic() < deadline, "the demo bucket never appeared"
    time.sleep(1)
project = Project.objects.get(slug="demo")
tokens = []
for n in range(PEOPLE):
    user = User.objects.create_user(f"probe{n}", password="probe-password-123")
    Membership.objects.create(project=project, user=user, role="manager")
    tokens.append(token_create(user=user, name="probe")[1])
form = demo_form_initial(project=project)
body = {
    "name": "probe fine-tune",
    "preset": "finetune",
    "flavor": form["flavor"],
    "params": {key: form[key] for key in DEMO_FORM},
    "volumes": [
        f"{form['model_volume']}:{MODEL_PATH}:ro",
        f"{form['data_volume']}:{DATA_PATH}:ro",
        f"{form['output_volume']}:{OUTPUT_PATH}:rw",
    ],
}
print("PROBE " + json.dumps({"tokens": tokens, "body": body}))
"""
READS = ("/api/v1/jobs/", "/api/v1/buckets/")
CLIENT_PROCESSES = 3


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else 0.0


def start_make_run(var: Path) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    port = _free()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AJUSTE_", "DJANGO_"))}
    env |= {"AJUSTE_VAR_DIR": str(var), "AJUSTE_BIND": f"127.0.0.1:{port}"}
    env |= {"AJUSTE_S3_PORT": str(_free()), "AJUSTE_REDIS_PORT": str(_free())}
    env |= {"AJUSTE_EVENTS_PORT": str(_free())}
    log = (var.parent / "make-run.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "controlpanel.run"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    while not _answers(f"{base}/login/"):
        if proc.poll() is not None:
            raise SystemExit(f"make run ended before a page answered: see {log.name}")
        time.sleep(0.2)
    return proc, base, env


def setup(env: dict[str, str], people: int) -> dict[str, Any]:
    """Each reader and the submitter a member of their own, with a token: the API's
    throttles count per token and per user (1,200 and 2,400 a minute), as for 31 people."""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", f"PEOPLE = {people}\n{SETUP}"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=400,
    )  # fmt: skip
    [line] = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    return dict(json.loads(line.removeprefix("PROBE ")))


def label(cmdline: list[str]) -> str:
    """What a process under `make run` is, from its command line."""
    text = " ".join(cmdline)
    for mark, name in (
        ("gunicorn", "web"),
        ("uvicorn", "events"),
        ("celery", "celery (worker, notifier, beat)"),
        ("watch_workloads", "watcher"),
        ("deploy.local.supervisor", "local runs (supervisors, sync)"),
        ("training.", "local runs (training)"),
        ("redis", "redis"),
        ("s3rver", "object store"),
    ):
        if mark in text:
            return name
    return "other"


def cpu_by_label(root: Any) -> dict[str, float]:
    """CPU seconds so far of `make run`'s processes and the local runs (detached: they are
    found by command line), grouped by `label`."""
    import psutil

    found: dict[str, float] = {}
    mine = {p.pid for p in root.children(recursive=True)}
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        name = label(cmd)
        if proc.pid not in mine and not name.startswith("local runs"):
            continue
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        found[name] = found.get(name, 0.0) + times.user + times.system
    return found


def read_for(
    base: str, tokens: list[str], seconds: float
) -> tuple[list[tuple[str, float]], list[str]]:
    """One reader thread per token for `seconds` (run in a process of the probe's pool): each
    asks for the job list, the bucket list and the newest job on the list, then waits a
    second. (kind, seconds) for each answer, and the errors."""
    import httpx

    times: list[tuple[str, float]] = []
    errors: list[str] = []
    stop = threading.Event()

    def read(token: str) -> None:
        headers = {"Authorization": f"Bearer {token}", "X-Ajuste-Project": "demo"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            while not stop.is_set():
                newest: list[str] = []
                for path in [*READS, None]:
                    if path is None and not newest:
                        break
                    path = path or f"/api/v1/jobs/{newest[0]}/"
                    started = time.perf_counter()
                    answer = http.get(path)
                    kind = "one job" if path.count("/") > 4 else path
                    times.append((kind, time.perf_counter() - started))
                    if answer.status_code != 200:
                        errors.append(f"GET {path}: {answer.status_code}")
                    elif path == READS[0]:
                        newest = [str(job["id"]) for job in answer.json()["results"][:1]]
                stop.wait(1.0)

    threads = [threading.Thread(target=read, args=(token,)) for token in tokens]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return times, errors


def _pid(_: int) -> int:
    time.sleep(0.2)  # so that each of the pool's processes answers one
    return os.getpid()


def probe_cpu(pids: list[int]) -> float:
    """CPU seconds so far of this process (the submitter) and the readers' processes."""
    import psutil

    total = 0.0
    for pid in {os.getpid(), *pids}:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def phase(
    base: str, probe: dict[str, Any], seconds: float, readers: int, submit: bool, root: Any
) -> None:
    """`readers` readers in CLIENT_PROCESSES processes of their own (31 client threads on one
    GIL measured the probe's own queueing), the submitter in this one."""
    import multiprocessing

    import httpx
    import psutil

    stop = threading.Event()
    errors: list[str] = []
    submitted: list[float] = []

    def write() -> None:
        token = probe["tokens"][readers]
        headers = {"Authorization": f"Bearer {token}", "X-Ajuste-Project": "demo"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            n = 0
            while not stop.is_set():
                n += 1
                body = json.loads(json.dumps(probe["body"]))
                body["volumes"][2] = body["volumes"][2].replace(":/", f"-{n}:/", 1)
                started = time.perf_counter()
                answer = http.post("/api/v1/jobs/", json=body)
                submitted.append(time.perf_counter() - started)
                if answer.status_code != 201:
                    errors.append(f"POST: {answer.status_code} {answer.text[:200]}")
                stop.wait(max(0.0, 1.0 - (time.perf_counter() - started)))

    tokens = probe["tokens"][:readers]
    shares = [tokens[i::CLIENT_PROCESSES] for i in range(CLIENT_PROCESSES)]
    threads = [threading.Thread(target=write)] if submit else []
    load = os.getloadavg()[0]
    with multiprocessing.get_context("spawn").Pool(CLIENT_PROCESSES) as pool:
        pool_pids = pool.map(_pid, [0] * CLIENT_PROCESSES)  # every client process is up first
        before, wall = cpu_by_label(root), time.monotonic()
        machine, clients = psutil.cpu_times(), probe_cpu(pool_pids)
        pending = [pool.apply_async(read_for, (base, share, seconds)) for share in shares]
        for thread in threads:
            thread.start()
        done = [result.get() for result in pending]
        after, wall = cpu_by_label(root), time.monotonic() - wall
        idle = psutil.cpu_times().idle - machine.idle
        niced = psutil.cpu_times().nice - machine.nice
        clients = probe_cpu(pool_pids) - clients
    stop.set()
    for thread in threads:
        thread.join()
    times: list[float] = []
    by_path: dict[str, list[float]] = {}
    for answers, failed in done:
        errors.extend(failed)
        for kind, took in answers:
            times.append(took)
            by_path.setdefault(kind, []).append(took)
    kind = "with 1 fine-tune submission a second" if submit else "readers alone"
    print(
        f"{kind}: {len(times)} API reads in {seconds:.0f} s ({len(times) / seconds:.1f}/s), "
        f"p50 {percentile(times, 0.5) * 1000:.0f} ms, p95 {percentile(times, 0.95) * 1000:.0f} ms"
        f"; {len(errors)} errors (load average {load:.1f} at the start)"
    )
    if submit:
        print(
            f"    {len(submitted)} submissions: p50 {percentile(submitted, 0.5) * 1000:.0f} ms, "
            f"p95 {percentile(submitted, 0.95) * 1000:.0f} ms"
        )
    for path, took in sorted(by_path.items()):
        print(
            f"    {path}: {len(took)}, p50 {percentile(took, 0.5) * 1000:.0f} ms, "
            f"p95 {percentile(took, 0.95) * 1000:.0f} ms"
        )
    for error in sorted(set(errors))[:5]:
        print(f"    {error}")
    used = {name: (cpu - before.get(name, 0.0)) / wall for name, cpu in after.items()}
    print("    CPU cores: " + ", ".join(f"{n} {c:.2f}" for n, c in sorted(used.items()) if c))
    print(
        f"    the machine: {psutil.cpu_count() - idle / wall:.2f} of {psutil.cpu_count()} cores "
        f"busy, of which niced (the local runs, JOB_NICE) {niced / wall:.2f}; the probe's own "
        f"processes {clients / wall:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--readers", type=int, default=30)
    args = parser.parse_args()
    import psutil

    with tempfile.TemporaryDirectory(prefix="bench-make-run-api-") as tmp:
        var = Path(tmp) / "var"
        proc, base, env = start_make_run(var)
        try:
            probe = setup(env, args.readers + 1)
            time.sleep(10)  # the first start's background work (the demo fill) settles
            root = psutil.Process(proc.pid)
            phase(base, probe, args.seconds, args.readers, submit=False, root=root)
            phase(base, probe, args.seconds, args.readers, submit=True, root=root)
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(180)


if __name__ == "__main__":
    main()
