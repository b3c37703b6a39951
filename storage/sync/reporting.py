"""What `python -m storage.sync` says (storage/sync/cli.py has the contract): the JSON lines
on stdout, the progress file and a push's summary file, for the volumes it syncs."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from storage.datastore import DatastoreConfig
from storage.sync.stats import SyncStats
from storage.volumes import VolumeSpec, render_volume_spec

PROGRESS_LINE_INTERVAL_S = 1.0
MAX_FAILURES_SHOWN = 100  # a result line stays readable even when thousands of files fail
MAX_SUMMARY_BYTES = 4096  # what Kubernetes keeps of a termination message


@dataclass(frozen=True)
class Volume:
    """One spec to sync, with its datastore and its local directory."""

    spec: VolumeSpec
    config: DatastoreConfig
    local_dir: Path
    manifest: Path | None = None

    @property
    def text(self) -> str:
        return render_volume_spec(self.spec)


class Reporter:
    """Writes the JSON lines and the progress file; thread-safe (workers report progress)."""

    def __init__(
        self,
        direction: str,
        progress_file: Path | None,
        out: TextIO,
        summary_file: Path | None = None,
    ) -> None:
        self.direction = direction
        self.progress_file = progress_file
        self.summary_file = summary_file
        self.out = out
        self._latest: dict[str, dict[str, Any]] = {}
        self._last_line: dict[str, float] = {}
        self._lock = threading.Lock()

    def progress(self, volume: Volume, stats: SyncStats, started: float) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last_line.get(volume.text, 0.0) < PROGRESS_LINE_INTERVAL_S:
                return
            self._last_line[volume.text] = now
        self.emit("progress", volume, stats, started)

    def emit(
        self, event: str, volume: Volume, stats: SyncStats | None, started: float, **extra: Any
    ) -> None:
        line: dict[str, Any] = {"event": event, "direction": self.direction, "spec": volume.text}
        line["local_dir"] = str(volume.local_dir)
        if stats is not None:
            line.update(stats.to_dict())
            del line["failures"]
            del line["conflicts"]
            if event == "result":
                failures = stats.to_dict()["failures"]
                line["failures"] = failures[:MAX_FAILURES_SHOWN]
                line["failures_omitted"] = max(0, len(failures) - MAX_FAILURES_SHOWN)
                line["conflicts"] = stats.conflicts[:MAX_FAILURES_SHOWN]
                line["conflicts_omitted"] = max(0, len(stats.conflicts) - MAX_FAILURES_SHOWN)
        line["elapsed_s"] = round(time.monotonic() - started, 3)
        line.update(extra)
        with self._lock:
            self.out.write(json.dumps(line, ensure_ascii=False) + "\n")
            self.out.flush()
            self._latest[volume.text] = line
            self._write_progress_file()

    def results(self) -> list[dict[str, Any]]:
        """The last round's result line of each volume."""
        with self._lock:
            return [line for line in self._latest.values() if line["event"] == "result"]

    def summary(self, results: Sequence[SyncStats], *, final: bool) -> None:
        """The push's summary line, and the summary file (a termination message)."""
        conflicts = sorted(key for stats in results for key in stats.conflicts)
        line: dict[str, Any] = {
            "event": "push",
            "uploaded": sum(stats.transferred for stats in results),
            "deleted": sum(stats.deleted for stats in results),
            "failed": sum(stats.failed for stats in results),
            "conflicts": conflicts[:MAX_FAILURES_SHOWN],
            "conflicts_total": len(conflicts),
            "final": final,
        }
        with self._lock:
            self.out.write(json.dumps(line, ensure_ascii=False) + "\n")
            self.out.flush()
        # Only a successful push writes the file: a failed one leaves it empty, so Kubernetes
        # falls back to the log's last lines, which say why (FallbackToLogsOnError).
        if self.summary_file is not None and all(stats.ok for stats in results):
            _write_summary(self.summary_file, line)

    def _write_progress_file(self) -> None:
        if self.progress_file is None:
            return
        document = {
            "direction": self.direction,
            "updated": datetime.now(UTC).isoformat(),
            "volumes": list(self._latest.values()),
        }
        temporary = self.progress_file.with_name(self.progress_file.name + ".tmp")
        temporary.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        os.replace(temporary, self.progress_file)


def summary_text(line: dict[str, Any], limit: int = MAX_SUMMARY_BYTES) -> str:
    """The summary as JSON of at most `limit` bytes: conflict keys are dropped from the end
    until it fits (`conflicts_total` still counts them all)."""
    line = dict(line)
    keys = list(line["conflicts"])
    while True:
        text = json.dumps({**line, "conflicts": keys}, ensure_ascii=False)
        if len(text.encode()) <= limit or not keys:
            return text
        keys = keys[: len(keys) // 2] if len(keys) > 8 else keys[:-1]


def _write_summary(path: Path, line: dict[str, Any]) -> None:
    try:
        # Rewritten in place: /dev/termination-log is a file the kubelet mounted, not ours
        # to replace.
        with open(path, "w", encoding="utf-8") as out:
            out.write(summary_text(line))
    except OSError as error:
        print(f"python -m storage.sync: cannot write {path}: {error}", file=sys.stderr)
