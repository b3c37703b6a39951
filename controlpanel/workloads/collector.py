"""The log collector: one loop in the watcher process reads the log of every running workload
and stores its new lines, whether anyone watches or not (logs.collect_logs).

A workload that printed is read again after `interval_s`; a quiet one less and less often, up
to `idle_s` (a line printed after a pause waits at most that long). Reads run on a few threads,
so one slow pod log does not hold up the others. Pages and the API read the stored rows only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections
from django.db.models import F

from controlpanel.workloads.logs import collect_logs
from controlpanel.workloads.models import Job, JobState

log = logging.getLogger(__name__)

# States in which the user's process may print: before them there is no log yet, after them
# the finalize task archives what is left.
PRINTING_STATES = (JobState.RUNNING, JobState.INTERRUPTING, JobState.TIMEOUT, JobState.FINALIZING)


class LogCollector:
    def __init__(
        self,
        *,
        interval_s: float = 0.25,
        idle_s: float = 2.0,
        threads: int = 8,
        collect: Callable[[str], int] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.idle_s = idle_s
        self.threads = threads
        self.collect = collect or _collect_one
        self._due: dict[str, float] = {}  # job id -> when to read it next (monotonic)
        self._wait: dict[str, float] = {}  # job id -> its current wait between reads

    def run(self, stop: threading.Event) -> None:
        def fresh(job_id: str) -> int:  # a thread of the pool: its own database connection
            close_old_connections()
            return self.collect(job_id)

        with ThreadPoolExecutor(self.threads, thread_name_prefix="log-collector") as pool:
            while not stop.is_set():
                close_old_connections()
                try:
                    self.tick(lambda _, ids: pool.map(fresh, ids))
                except Exception:  # a database hiccup: the loop goes on
                    log.exception("log collection round failed")
                stop.wait(self.interval_s)

    def tick(self, run_all: Callable[..., object] = map) -> list[str]:
        """One round: read every printing workload that is due; returns the ids read."""
        live = {str(pk) for pk in _printing_jobs()}
        for job_id in set(self._due) - live:
            self._due.pop(job_id, None)
            self._wait.pop(job_id, None)
        now = time.monotonic()
        due = sorted(job_id for job_id in live if self._due.get(job_id, 0.0) <= now)
        results = list(run_all(self.collect, due))  # type: ignore[call-overload]
        for job_id, added in zip(due, results, strict=True):
            self._schedule(job_id, added)
        return due

    def _schedule(self, job_id: str, added: int) -> None:
        if added > 0:
            wait = self.interval_s
        elif added == 0:
            wait = min(self._wait.get(job_id, self.interval_s) * 2, self.idle_s)
        else:  # the read failed: try again after the longest wait
            wait = self.idle_s
        self._wait[job_id] = wait
        self._due[job_id] = time.monotonic() + wait


def _printing_jobs() -> list[object]:
    return list(
        Job.objects.filter(
            state__in=PRINTING_STATES, logs_archived=False, launched_run__gte=F("run")
        ).values_list("pk", flat=True)
    )


def _collect_one(job_id: str) -> int:
    """Lines stored, or -1 when the read failed (logged; the next round tries again)."""
    try:
        added, _ = collect_logs(job_id=job_id)
    except Exception as exc:  # a cluster or database error must not stop the other logs
        log.warning("collecting the log of job %s failed: %s", job_id, exc)
        return -1
    return added
