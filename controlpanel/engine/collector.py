"""The log collector: a loop in each watcher replica reads the log of every running workload
the replica owns (shards.py: spread over the replicas, taken over when one dies) and stores
its new lines, whether anyone watches or not (logs.collect_logs). On Kubernetes a read is a
stream (`follow=true`) that lasts as long as the workload prints (logs.follow_logs).

A workload that printed is read again after `interval_s`; a quiet one less and less often, up
to `idle_s`. A log that someone follows (a job page polling it, a live stream of it, `ajuste
logs -f`) is read every `interval_s` however quiet, so a line printed after a pause reaches its
readers within about a second: each poll notes the job in the cache for `FOLLOWED_S`
(`note_followed`; the streams of a web process, `note_followed_many` once a second), one write
whatever the number of readers, so 50 readers cost the cluster what one does. Reads run on a
thread each, and a round starts what is due without waiting for reads still going: one slow
pod log holds up no other. In the watcher a reading thread stores nothing itself: it hands its
batches to the replica's `LOG_WRITERS` writer threads (logwriters.py), so the connections a
replica holds do not grow with the logs it follows. Pages and the API read the stored rows
only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections, connections
from django.db.models import F

from controlpanel.core.metrics import store as metrics_store
from controlpanel.engine.logs import collect_logs, follow_logs
from controlpanel.engine.logwriters import Db, here
from controlpanel.engine.models import Workload
from controlpanel.engine.registry import states_of
from controlpanel.engine.shards import Shard

log = logging.getLogger(__name__)

# States in which the user's process may print, every kind's: before them there is no log yet,
# after them the finalize task archives what is left.
PRINTING_STATES = states_of(lambda kind: kind.printing)
# A poll marks its log followed for this long: a page polls every second while visible, so a
# hidden or closed tab lets the log fall back to the quiet back-off within a few seconds.
FOLLOWED_S = 3


def _followed_key(job_id: object) -> str:
    return f"ajuste:log-followed:{job_id}"


def note_followed(job_id: object) -> None:
    """Someone is reading this job's log as it comes (one cache write per poll)."""
    cache.set(_followed_key(job_id), 1, timeout=FOLLOWED_S)


def note_followed_many(job_ids: list[str]) -> None:
    """These jobs' logs are followed by live streams (one write per web process and second,
    whatever the number of streams: controlpanel/streams/hub.py)."""
    if job_ids:
        cache.set_many({_followed_key(job_id): 1 for job_id in job_ids}, timeout=FOLLOWED_S)


def _followed(job_ids: set[str]) -> set[str]:
    if not job_ids:
        return set()
    found = cache.get_many([_followed_key(job_id) for job_id in job_ids])
    return {job_id for job_id in job_ids if _followed_key(job_id) in found}


class LogCollector:
    """Reads the logs this replica owns (`shard`; all of them without one). With `submit`
    (the run loop's thread pool) each read runs on its own and the round never waits for one:
    a read still going is not started again, and a stuck read holds only its own log."""

    def __init__(
        self,
        *,
        interval_s: float = 0.25,
        idle_s: float = 2.0,
        threads: int = 8,
        collect: Callable[[str], int] | None = None,
        shard: Shard | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.idle_s = idle_s
        self.threads = threads
        self.shard = shard
        self.collect = collect or _collect_one
        self._due: dict[str, float] = {}  # job id -> when to read it next (monotonic)
        self._wait: dict[str, float] = {}  # job id -> its current wait between reads
        self._failing: set[str] = set()  # last read failed: the longest wait, followed or not
        self._running: dict[str, Future[int]] = {}  # reads going on now

    def run(self, stop: threading.Event) -> None:
        def fresh(job_id: str) -> int:  # a thread of the pool: what it opened, it closes
            close_old_connections()
            try:
                return self.collect(job_id)
            finally:
                connections.close_all()

        beat_s = settings.LOG_SHARD_TTL_SECONDS / 4
        next_beat = 0.0
        with ThreadPoolExecutor(self.threads, thread_name_prefix="log-collector") as pool:
            try:
                while not stop.is_set():
                    close_old_connections()
                    started = time.monotonic()
                    if self.shard is not None and started >= next_beat:
                        self.shard.beat()
                        next_beat = started + beat_s
                    try:
                        self.tick(submit=lambda job_id: pool.submit(fresh, job_id))
                    except Exception:  # a database hiccup: the loop goes on
                        log.exception("log collection round failed")
                    else:  # /metrics' log collector lag
                        metrics_store.note_collector_round(seconds=time.monotonic() - started)
                    stop.wait(self.interval_s)
            finally:
                if self.shard is not None:
                    self.shard.leave()
                pool.shutdown(wait=False, cancel_futures=True)

    def owns(self, job_id: str) -> bool:
        return self.shard is None or self.shard.owns(job_id)

    def tick(self, submit: Callable[[str], Future[int]] | None = None) -> list[str]:
        """One round: start a read of every owned printing workload that is due or followed
        and not being read; returns the ids started. Without `submit` the reads run here."""
        for job_id, future in list(self._running.items()):
            if future.done():
                del self._running[job_id]
                self._schedule(job_id, -1 if future.exception() else future.result())
        live = {str(pk) for pk in _printing_jobs() if self.owns(str(pk))}
        for job_id in set(self._due) - live:
            self._due.pop(job_id, None)
            self._wait.pop(job_id, None)
            self._failing.discard(job_id)
        now = time.monotonic()
        followed = _followed(live)
        due = sorted(
            job_id
            for job_id in live - set(self._running)
            if self._due.get(job_id, 0.0) <= now
            or (job_id in followed and job_id not in self._failing)
        )
        for job_id in due:
            if submit is None:
                self._schedule(job_id, self.collect(job_id))
            else:
                self._running[job_id] = submit(job_id)
        return due

    def _schedule(self, job_id: str, added: int) -> None:
        if added > 0:
            wait = self.interval_s
        elif added == 0:
            wait = min(self._wait.get(job_id, self.interval_s) * 2, self.idle_s)
        else:  # the read failed: try again after the longest wait
            wait = self.idle_s
        (self._failing.add if added < 0 else self._failing.discard)(job_id)
        self._wait[job_id] = wait
        self._due[job_id] = time.monotonic() + wait


def _printing_jobs() -> list[object]:
    return list(
        Workload.objects.filter(
            state__in=PRINTING_STATES, logs_archived=False, launched_run__gte=F("run")
        ).values_list("pk", flat=True)
    )


def follow_while_owned(
    shard: Shard | None, stop: threading.Event, *, db: Db = here
) -> Callable[[str], int]:
    """The watcher's read: the log followed as a stream (`follow_logs`) for as long as this
    replica owns the workload and runs. With `db=writers.run` (logwriters.py) the reading
    thread holds no database connection: the replica's connections are its writers'."""

    def follow(job_id: str) -> int:
        def keep() -> bool:
            return not stop.is_set() and (shard is None or shard.owns(job_id))

        try:
            return follow_logs(job_id=job_id, keep=keep, db=db)
        except Exception as exc:  # a cluster or database error must not stop the other logs
            log.warning("following the log of job %s failed: %s", job_id, exc)
            return -1

    return follow


def _collect_one(job_id: str) -> int:
    """Lines stored, or -1 when the read failed (logged; the next round tries again)."""
    try:
        added, _ = collect_logs(job_id=job_id)
    except Exception as exc:  # a cluster or database error must not stop the other logs
        log.warning("collecting the log of job %s failed: %s", job_id, exc)
        return -1
    return added
