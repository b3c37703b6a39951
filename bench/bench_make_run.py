"""How long `make run` takes to a page that answers, and where the time goes.

    .venv/bin/python bench/bench_make_run.py [--runs 3]          # second starts, this checkout
    .venv/bin/python bench/bench_make_run.py --first [--runs 1]  # first start of a fresh copy

A second start is `make run` again on a var/ that already ran (its own, under a temporary
folder, so the checkout's var/ is untouched). A first start is `make run` in a copy of HEAD
(`git archive`) with no .venv, node_modules or var/: the venv, the installs, the database and
everything else, with the package caches as this machine has them. Each line `make run` or
make prints is stamped with the seconds since the start; the time is to the first answer of
/login/ (polled every 0.1 s), then the run is stopped with SIGINT (a Ctrl-C). Ports are free
ones, chosen here. The load average is printed beside each figure: on a shared machine it
matters more than anything measured.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Lines that mark a step: make's own recipe lines, then make run's.
MARKS = ("python3 -m venv", "pip install", "npm ci", "•", "Ajuste is up", "web ")


def _free() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
            return bool(response.status == 200)
    except OSError:
        return False


def one_start(checkout: Path, var: Path, command: list[str]) -> tuple[float, list[str]]:
    """Seconds to the first answer, and the stamped step lines."""
    port = _free()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AJUSTE_", "DJANGO_"))}
    env |= {"AJUSTE_VAR_DIR": str(var), "AJUSTE_BIND": f"127.0.0.1:{port}"}
    env |= {"AJUSTE_S3_PORT": str(_free()), "AJUSTE_REDIS_PORT": str(_free())}
    started = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.lstrip().startswith(MARKS) and "GET /" not in line:
                lines.append(f"{time.monotonic() - started:7.1f} s  {line.rstrip()[:110]}")

    threading.Thread(target=read, daemon=True).start()
    while not _answers(f"http://127.0.0.1:{port}/login/"):
        if proc.poll() is not None:
            raise SystemExit("make run ended before a page answered:\n" + "\n".join(lines))
        time.sleep(0.1)
    took = time.monotonic() - started
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(120)
    return took, lines


def fresh_copy(into: Path) -> Path:
    """HEAD as a new clone has it (no .venv, node_modules, var/)."""
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first", action="store_true", help="a fresh copy's first start")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-make-run-") as tmp:
        for n in range(args.runs + (0 if args.first else 1)):
            if args.first:
                checkout = fresh_copy(Path(tmp) / f"copy-{n}")
                command = ["make", "--no-print-directory", "run"]
            else:
                checkout, command = ROOT, [sys.executable, "-m", "controlpanel.run"]
            var = Path(tmp) / (f"var-{n}" if args.first else "var")
            load = os.getloadavg()[0]
            took, lines = one_start(checkout, var, command)
            kind = "first" if args.first else ("warm-up" if n == 0 else "second")
            print(f"{kind} start: {took:.1f} s to a page (load average {load:.1f})")
            print("\n".join(f"    {line}" for line in lines), flush=True)


if __name__ == "__main__":
    main()
