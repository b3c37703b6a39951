"""The worker's liveness heartbeat does not go through Redis: during a broker outage the worker
keeps touching its file, and the liveness probe of k8s/worker.yaml (run here as written) passes
on a fresh file and fails on a stale one."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.fixtures.processes import Processes, wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_the_heartbeat_goes_on_while_the_broker_is_down(
    transactional_db: Any, processes: Callable[[dict[str, str]], Processes], tmp_path: Path
) -> None:
    beat = tmp_path / "worker-heartbeat"
    procs = processes(
        {
            "REDIS_URL": "redis://127.0.0.1:1/0",  # nothing listens there
            "WORKER_HEARTBEAT_FILE": str(beat),
            "WORKER_HEARTBEAT_SECONDS": "1",
        }
    )
    worker = procs.worker()
    wait_for(lambda: "connecting to 127.0.0.1:1" in procs.logs(), 60, "a broker error", procs)
    first = wait_for(lambda: beat.exists() and beat.stat().st_mtime, 60, "a heartbeat", procs)
    wait_for(lambda: beat.stat().st_mtime > first, 30, "a later heartbeat", procs)
    assert worker.poll() is None  # still retrying the broker, and alive by its heartbeat


def _probe() -> list[str]:
    worker = yaml.safe_load((ROOT / "k8s" / "worker.yaml").read_text())
    container = worker["spec"]["template"]["spec"]["containers"][0]
    return container["livenessProbe"]["exec"]["command"]


def test_the_liveness_probe_reads_the_file_only(tmp_path: Path) -> None:
    beat = tmp_path / "worker-heartbeat"
    # No broker, no database in the probe's environment: only the file.
    env = {"PATH": os.environ["PATH"], "WORKER_HEARTBEAT_FILE": str(beat)}
    run = lambda: subprocess.run(_probe(), env=env, capture_output=True, timeout=30)  # noqa: E731
    assert run().returncode != 0  # never touched
    beat.touch()
    assert run().returncode == 0
    os.utime(beat, (0, 0))  # last touched in 1970
    assert run().returncode != 0
