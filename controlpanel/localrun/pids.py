"""What `make run` started, kept as pid files under var/run/ so that the next start can clean
what a crash left (a `kill -9`, a closed terminal): each file holds the pid of a process group
leader and its start time, so a pid the system gave to another process since is left alone."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

POLL_S = 0.1


def _start_ticks(pid: int) -> int | None:
    """When `pid` started (field 22 of /proc/<pid>/stat), None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def _running(pid: int, ticks: int | None) -> bool:
    if ticks is None or _start_ticks(pid) != ticks:
        return False
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def pid_dir(var: Path) -> Path:
    return var / "run"


def record(var: Path, name: str, pid: int) -> None:
    """Note that `pid` (a process group leader) is ours, as `name`."""
    folder = pid_dir(var)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    (folder / f"{name}.pid").write_text(f"{pid} {_start_ticks(pid)}\n")


def forget(var: Path, name: str) -> None:
    (pid_dir(var) / f"{name}.pid").unlink(missing_ok=True)


def running(var: Path, name: str) -> int | None:
    """The pid recorded as `name` when that process still runs, else None."""
    try:
        pid_text, ticks_text = (pid_dir(var) / f"{name}.pid").read_text().split()
        pid, ticks = int(pid_text), (None if ticks_text == "None" else int(ticks_text))
    except (OSError, ValueError):
        return None
    return pid if _running(pid, ticks) else None


def leftovers(var: Path) -> dict[str, int]:
    """The recorded groups whose leader still runs (name → pid); stale files are removed."""
    alive = {}
    for path in sorted(pid_dir(var).glob("*.pid")):
        pid = running(var, path.stem)
        if pid is None:
            path.unlink(missing_ok=True)
        else:
            alive[path.stem] = pid
    return alive


def stop_groups(groups: dict[str, int], *, wait_s: float) -> None:
    """SIGTERM each process group, SIGKILL those still there after `wait_s`."""
    for pid in groups.values():
        signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(_group_exists(pid) for pid in groups.values()):
        time.sleep(POLL_S)
    for pid in groups.values():
        signal_group(pid, signal.SIGKILL)


def clean_leftovers(var: Path, *, wait_s: float = 10.0) -> list[str]:
    """Stop what an earlier `make run` of this var/ left running; the names stopped."""
    groups = leftovers(var)
    stop_groups(groups, wait_s=wait_s)
    for name in groups:
        forget(var, name)
    return sorted(groups)


def signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _group_exists(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
