"""Counters of one pull or push, named like OVHcloud's data-sync fields, kept thread-safe."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

# Byte-level progress (large files) reaches the callback at most this often.
PROGRESS_INTERVAL_S = 0.5

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncFailure:
    """One key (or local path) that could not be synced, and why."""

    key: str
    error: str


@dataclass
class SyncStats:
    """Outcome of one pull or push.

    `total` files were considered; `processed` of them are handled so far, each one either
    `transferred` (`transferred_bytes` in all), `skipped` (unchanged, or kept for a reason) or
    `failed` (listed in `failures`). `deleted` counts remote objects a `rwd` push removed.
    Failures that concern no single file (listing, scan) are in `failures` too. `conflicts`
    are the keys a push found changed on both sides since its base: the remote copy was
    kept (they are neither failed nor skipped: counted as processed)."""

    direction: str
    total: int = 0
    processed: int = 0
    failed: int = 0
    skipped: int = 0
    deleted: int = 0
    transferred: int = 0
    transferred_bytes: int = 0
    failures: list[SyncFailure] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing failed."""
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


ProgressCallback = Callable[[SyncStats], None]


class Tracker:
    """Updates one SyncStats from many worker threads and reports snapshots to `progress`."""

    def __init__(self, direction: str, progress: ProgressCallback | None) -> None:
        self._stats = SyncStats(direction=direction)
        self._progress = progress
        self._lock = threading.Lock()
        self._last_report = 0.0

    def add_total(self, count: int) -> None:
        with self._lock:
            self._stats.total += count
        self._report()

    def transferred(self) -> None:
        with self._lock:
            self._stats.transferred += 1
            self._stats.processed += 1
        self._report()

    def skipped(self) -> None:
        with self._lock:
            self._stats.skipped += 1
            self._stats.processed += 1
        self._report()

    def failed(self, key: str, error: str, *, counts_as_file: bool = True) -> None:
        """Record a failure; `counts_as_file=False` for failures outside the file total."""
        with self._lock:
            self._stats.failures.append(SyncFailure(key=key, error=error))
            if counts_as_file:
                self._stats.failed += 1
                self._stats.processed += 1
        self._report()

    def conflict(self, key: str, *, counts_as_file: bool = True) -> None:
        """A key changed on both sides: the remote copy is kept."""
        with self._lock:
            self._stats.conflicts.append(key)
            if counts_as_file:
                self._stats.processed += 1
        self._report()

    def deleted(self, count: int) -> None:
        with self._lock:
            self._stats.deleted += count
        self._report()

    def add_bytes(self, count: int) -> None:
        """Byte progress (a boto3 transfer callback); reported at most every 0.5 s."""
        with self._lock:
            self._stats.transferred_bytes += count
        self._report(throttled=True)

    def snapshot(self) -> SyncStats:
        with self._lock:
            return replace(
                self._stats,
                failures=list(self._stats.failures),
                conflicts=sorted(self._stats.conflicts),
            )

    def finish(self) -> SyncStats:
        stats = self.snapshot()
        self._call(stats)
        return stats

    def _report(self, *, throttled: bool = False) -> None:
        if self._progress is None:
            return
        now = time.monotonic()
        if throttled and now - self._last_report < PROGRESS_INTERVAL_S:
            return
        self._last_report = now
        self._call(self.snapshot())

    def _call(self, stats: SyncStats) -> None:
        if self._progress is None:
            return
        try:
            self._progress(stats)
        except Exception:
            # A broken progress consumer (a closed pipe...) must not fail the transfer itself.
            logger.exception("sync progress callback failed")


MAX_NOTE_KEYS = 5


def conflict_note(conflicts: list[str], total: int | None = None) -> str:
    """The sentence a job's history shows for a push's conflicts ("" when there are none)."""
    total = len(conflicts) if total is None else total
    if not total:
        return ""
    shown = ", ".join(_short(key) for key in conflicts[:MAX_NOTE_KEYS])
    hidden = total - min(len(conflicts), MAX_NOTE_KEYS)
    more = f" and {hidden} more" if hidden > 0 else ""
    plural = "conflict" if total == 1 else "conflicts"
    copies = "copy was" if total == 1 else "copies were"
    return f"pushed with {total} {plural}: {shown}{more}; the remote {copies} kept"


def _short(key: str, limit: int = 60) -> str:
    """A key shortened in its middle: its start and its file name stay readable."""
    return key if len(key) <= limit else f"{key[: limit // 2 - 1]}…{key[-(limit // 2) :]}"
