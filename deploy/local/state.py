"""A local run's state file and its plan, and whether its supervisor still lives.

`state.json` is the single source of truth for the local backend (the panel process may
restart at any time): the supervisor rewrites it atomically at each step. Fields: `phase`,
`reason`, `run_uid`, `supervisor_pid` and `supervisor_started` (its start time in clock ticks,
so a recycled pid is not mistaken for it), `started_at`/`finished_at` (ISO 8601, the user
process's own times), `exit_code`, `timed_out`, `push_attempt`, `outcome` (the phase to end
in once the push succeeds), `gpus`, `url`, `created_at`; `periodic_push` (the last push while
running: `at`, `ok`, `error`); a notebook's `port` and `token`, and what its editor last did
(`last_activity`, `kernels`, `connections`, read by the supervisor every few seconds).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

State = dict[str, Any]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def parse_iso(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def write_json(path: Path, data: dict[str, Any], *, private: bool = False) -> None:
    """Write `path` atomically (a reader never sees half a file); 0600 when `private`."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(temp, flags, 0o600 if private else 0o644)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, sort_keys=True)
    os.replace(temp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The file's content, or None when it does not exist (yet)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return data


def read_state(run: Path) -> State | None:
    return read_json(run / "state.json")


def update_state(run: Path, **changes: Any) -> State:
    """Merge `changes` into the state file (only the supervisor and the locked backend write)."""
    state = read_state(run) or {}
    state.update(changes, updated_at=now_iso())
    write_json(run / "state.json", state)
    return state


def process_start_ticks(pid: int) -> int | None:
    """When `pid` started (field 22 of /proc/<pid>/stat), or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def is_alive(pid: int | None, started: int | None) -> bool:
    """Whether the process that wrote the state still runs (and is not a zombie)."""
    if not pid:
        return False
    ticks = process_start_ticks(pid)
    if ticks is None or (started is not None and ticks != started):
        return False
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status
