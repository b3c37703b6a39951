"""The Procfile's processes (web, worker, notifier, watcher, beat), as honcho ran them: each
through `sh -c` (so `${VAR:-default}` works), in a session of its own, its output prefixed
with its name; when one ends, all end. Unlike honcho it records each process group under
var/run/ (pids.py), so a crash of `make run` leaves nothing the next start cannot clean, and
it stops them in an order: the web first (no new work), then the rest."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from controlpanel.localrun import pids

STOP_FIRST = ("web",)  # then everything else at once
POLL_S = 0.2


def read_procfile(path: Path) -> list[tuple[str, str]]:
    """(name, command) of each `name: command` line."""
    entries = []
    for line in path.read_text().splitlines():
        name, sep, command = line.partition(":")
        if sep and name.strip() and not name.lstrip().startswith("#"):
            entries.append((name.strip(), command.strip()))
    return entries


class Processes:
    """The started processes, by name."""

    def __init__(self, var: Path, env: dict[str, str], cwd: Path) -> None:
        self.var, self.env, self.cwd = var, env, cwd
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.width = 8
        self._lock = threading.Lock()

    def start(self, entries: Iterable[tuple[str, str]]) -> None:
        entries = list(entries)
        self.width = max([self.width, *(len(name) for name, _ in entries)]) + 1
        for name, command in entries:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", f"exec {command}"],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.procs[name] = proc
            pids.record(self.var, f"proc-{name}", proc.pid)
            threading.Thread(target=self._relay, args=(name, proc.stdout), daemon=True).start()

    def _relay(self, name: str, stream: IO[bytes] | None) -> None:
        assert stream is not None
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            with self._lock, contextlib.suppress(OSError):
                # A closed terminal must not stop the relay: the process would block writing.
                sys.stdout.write(f"{name.ljust(self.width)}| {line}\n")
                sys.stdout.flush()

    def wait_any(self) -> str:
        """Block until one process ends; its name."""
        while True:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    return name
            time.sleep(POLL_S)

    def stop(self, *, wait_s: float = 20.0) -> None:
        """SIGTERM the web first, then the others; SIGKILL what outlives `wait_s`."""
        first = [n for n in self.procs if n in STOP_FIRST]
        for names in (first, [n for n in self.procs if n not in STOP_FIRST]):
            for name in names:
                pids.signal_group(self.procs[name].pid, signal.SIGTERM)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and any(self.procs[n].poll() is None for n in names):
                time.sleep(POLL_S)
            for name in names:  # the leader ended: what it left in its group goes too
                pids.signal_group(self.procs[name].pid, signal.SIGKILL)
                self.procs[name].wait()
                pids.forget(self.var, f"proc-{name}")

    def kill(self) -> None:
        """At once: a second Ctrl-C."""
        for proc in self.procs.values():
            pids.signal_group(proc.pid, signal.SIGKILL)
