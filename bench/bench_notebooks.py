"""Notebook benchmark: create → usable JupyterLab with the local backend (`make run`).

    .venv/bin/python bench/bench_notebooks.py [--runs 10] [--volume]

Measured at the backend (`deploy.local.LocalBackend`, what the panel's tasks call), from
`apply_notebook` to the first `GET <path>api/status` answering 200 with the notebook's token
(polled every 20 ms on the port the backend chose), and to the first observation RUNNING
(what the panel shows; the URL appears then). Cases, `--runs` each:
- create: a new notebook each time (a fresh workspace);
- stop → start: one notebook stopped (`running=False`: the server ends, the workspace stays)
  and started again (same port and token), both directions timed;
- baseline: `python -m jupyterlab` with its defaults on a free port (what a JupyterHub local
  spawner starts), to /api/status 200: what `deploy.local.jupyter` and its flags save.
`--volume` mounts a one-file ro volume from the embedded S3 server (s3rver) in the create and
stop → start cases: the pull is then part of the time.
Percentiles are nearest-rank (p95 of 10 runs is the slowest run). Anchor (issue #13):
JupyterHub 5's local process spawner, median 8.4 s on this kind of machine; goal ≤ 4.2 s.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _panel import nearest_rank as percentile

from deploy.local import LocalBackend
from deploy.local.paths import run_dir
from deploy.local.state import read_state
from deploy.types import FlavorSpec, NotebookRequest, Phase, ProjectRequest
from storage.volumes import Mode, VolumeSpec

NS = "ajuste-bench"
CPU = FlavorSpec(name="cpu", gpu_model="", gpus_per_unit=0, vcpu_per_unit=1, memory_gib_per_unit=2)
POLL_S = 0.02


def line(name: str, values: list[float]) -> str:
    return (
        f"{name:<42} p50 {percentile(values, 50):6.2f} s   p95 {percentile(values, 95):6.2f} s"
        f"   mean {statistics.mean(values):6.2f} s   (n={len(values)})"
    )


def wait_status(url: str, token: str, deadline_s: float = 120) -> None:
    """Until GET url answers 200 with the token."""
    headers = {"Authorization": f"token {token}"}
    give_up = time.monotonic() + deadline_s
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < give_up:
            try:
                if client.get(url, headers=headers).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(POLL_S)
    raise SystemExit(f"{url} did not answer within {deadline_s} s")


def wait_phase(backend: LocalBackend, notebook: NotebookRequest, phase: Phase) -> None:
    give_up = time.monotonic() + 120
    while time.monotonic() < give_up:
        observed = backend.observe_notebook(ref=notebook.ref)
        if observed.phase is phase:
            return
        if observed.phase.is_final and phase is Phase.RUNNING:
            raise SystemExit(f"notebook {notebook.id}: {observed.phase} {observed.reason}")
        time.sleep(POLL_S)
    raise SystemExit(f"notebook {notebook.id} never reached {phase}")


def start(backend: LocalBackend, notebook: NotebookRequest) -> tuple[float, float]:
    """apply_notebook → (seconds to /api/status 200, seconds to RUNNING observed)."""
    began = time.perf_counter()
    backend.apply_notebook(notebook=notebook)
    state = read_state(run_dir(backend.base, notebook.ref)) or {}
    api = str(state["url"]).split("?", 1)[0] + "api/status"
    wait_status(api, str(state["token"]))
    answered = time.perf_counter() - began
    wait_phase(backend, notebook, Phase.RUNNING)
    return answered, time.perf_counter() - began


def stop(backend: LocalBackend, notebook: NotebookRequest) -> float:
    began = time.perf_counter()
    backend.apply_notebook(notebook=replace(notebook, running=False))
    wait_phase(backend, notebook, Phase.STOPPED)
    return time.perf_counter() - began


def baseline(runs: int, workdir: Path) -> list[float]:
    """Plain `python -m jupyterlab` (its defaults) to /api/status 200."""
    times = []
    for _ in range(runs):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        began = time.perf_counter()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--allow-root",
                "--ip=127.0.0.1",
                f"--port={port}",
                f"--ServerApp.root_dir={workdir}",
                "--IdentityProvider.token=bench",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_status(f"http://127.0.0.1:{port}/api/status", "bench")
            times.append(time.perf_counter() - began)
        finally:
            server.terminate()
            server.wait(timeout=30)
    return times


def bench_notebook(key: str, volumes: tuple[VolumeSpec, ...]) -> NotebookRequest:
    """The notebook `key` of project `bench` on the local image, at /notebooks/bench/<key>/."""
    return NotebookRequest(
        id=key,
        project="bench",
        namespace=NS,
        name="bench",
        image="local",
        flavor=CPU,
        path=f"/notebooks/bench/{key}/",
        volumes=volumes,
        push_every_s=0,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--volume", action="store_true", help="a one-file ro volume (s3rver)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ajuste-bench-nb-") as tmp:
        base = Path(tmp)
        backend = LocalBackend(base_dir=base / "local", gpus=list)
        volumes: tuple[VolumeSpec, ...] = ()
        s3 = None
        if args.volume:
            from storage.embedded import start_embedded_s3
            from storage.objects import create_bucket, put_object

            s3 = start_embedded_s3(directory=base / "s3")
            create_bucket(s3.config(), bucket="bench")
            put_object(s3.config(), bucket="bench", key="data/corpus.txt", data=b"x" * 4096)
            volumes = (VolumeSpec("bench", s3.config().alias, "data", "/workspace/data", Mode.RO),)
            datastores = (s3.config(),)
        else:
            datastores = ()
        backend.ensure_project(
            project=ProjectRequest(slug="bench", namespace=NS, gpu_quota=0, datastores=datastores)
        )
        try:
            answered, running = [], []
            for index in range(args.runs):
                notebook = bench_notebook(f"c{index}", volumes)
                status_s, running_s = start(backend, notebook)
                answered.append(status_s)
                running.append(running_s)
                backend.delete_notebook(ref=notebook.ref)
            print(line("create → /api/status 200", answered))
            print(line("create → RUNNING observed", running))

            notebook = bench_notebook("restart", volumes)
            start(backend, notebook)
            stops, restarts, restarts_running = [], [], []
            for _ in range(args.runs):
                stops.append(stop(backend, notebook))
                status_s, running_s = start(backend, notebook)
                restarts.append(status_s)
                restarts_running.append(running_s)
            backend.delete_notebook(ref=notebook.ref)
            print(line("stop → STOPPED (workspace kept)", stops))
            print(line("start again → /api/status 200", restarts))
            print(line("start again → RUNNING observed", restarts_running))
        finally:
            if s3 is not None:
                s3.stop()
        print(line("baseline: python -m jupyterlab → status", baseline(args.runs, base)))


if __name__ == "__main__":
    main()
