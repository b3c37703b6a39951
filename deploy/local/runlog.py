"""What a local run's logs say, read back by its supervisor: a failing process's last words
(`output.log`), why a sync failed and what its push left as conflicts (`sync.log`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deploy.local.paths import as_workload
from storage.sync.stats import conflict_note


def last_words(log: Path, workspace: Path) -> str:
    """The last line of a log that says something (what a failing process said last; not a
    rule of `=====` as torchrun's failure report ends with), its paths the workload's own:
    written so before it is clipped, since a cut path no longer reads as one."""
    lines = [
        line
        for line in _tail_lines(log, max(0, size(log) - 8192))
        if any(c.isalnum() for c in line)
    ]
    return _clip(as_workload(lines[-1], workspace)) if lines else ""


def sync_failure(log: Path, start: int, code: int) -> str:
    """Why a sync run failed, from its JSON lines written after `start`: the first failed
    file of a `result` line, else the message the engine printed (bad usage), else the code."""
    lines = _tail_lines(log, start)
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("event") != "result":
            continue
        if event.get("failed") or event.get("failures"):
            first = (event.get("failures") or [{}])[0]
            detail = f"{first.get('key', '?')}: {first.get('error', 'failed')}"
            if event.get("failed"):
                detail = f"{event['failed']} file(s) failed, first {detail}"
            return _clip(f"{event.get('spec')}: {detail}")
    plain = [line for line in lines if not line.lstrip().startswith("{")]
    return _clip(plain[-1]) if plain else f"the sync engine exited with {code}"


def sync_state_dir(run: Path) -> Path:
    """The sync engine's manifests of a run: beside `root`, so outside every volume."""
    return run / "sync"


def push_note(log: Path, start: int) -> str:
    """The conflicts of the push whose lines start at `start`, as the job's history says
    them ("" when there were none): from the engine's last `push` summary line."""
    summary: dict[str, Any] = {}
    for line in _tail_lines(log, start):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "push":
            summary = event
    return conflict_note(list(summary.get("conflicts") or []), summary.get("conflicts_total"))


def _tail_lines(log: Path, start: int) -> list[str]:
    try:
        with open(log, "rb") as handle:
            handle.seek(start)
            text = handle.read(1024 * 1024).decode(errors="replace")
    except FileNotFoundError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
