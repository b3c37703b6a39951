"""`manage.py watch_workloads`: follow the backend's workloads and record changes as they
happen (the Procfile's `watcher`). The Kubernetes backend lists then watches pods; a backend
without a watch is polled. The beat sweep stays the safety net: either alone converges.

Beside the watch, the same process runs the log collector (collector.py): the log of every
running workload is stored as it is printed, watched or not.

The watch runs in one replica at a time: the one holding the `ajuste-watch` Lease
(engine/leader.py). Another replica (a rolling update's new pod, a second one for
availability) waits and takes over when the holder lets go or stops renewing. The log
collection runs in every replica, each following the logs it owns (engine/shards.py); a dead
replica's logs are taken over by the others within LOG_SHARD_TTL_SECONDS. The threads that
follow the logs hold no database connection: they hand their batches to LOG_WRITERS writer
threads (engine/logwriters.py), so a replica holds its main thread's, the collector loop's and
its writers' connections, whatever the number of logs."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections, connections

from controlpanel.engine.backend import get_backend
from controlpanel.engine.collector import LogCollector, follow_while_owned
from controlpanel.engine.leader import WATCH_LEASE, Leadership, leadership
from controlpanel.engine.logwriters import LogWriters
from controlpanel.engine.shards import Shard
from controlpanel.engine.sweep import record_observation
from deploy.types import DeployError, ObservedWorkload

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Follow workloads on the compute backend and record their state changes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--poll-seconds",
            type=float,
            default=1.0,
            help="Polling period for backends without a watch.",
        )
        parser.add_argument("--resync-seconds", type=float, default=300.0)
        parser.add_argument(
            "--log-seconds",
            type=float,
            default=0.25,
            help="How often the log of a workload that is printing is read.",
        )
        parser.add_argument(
            "--log-threads",
            type=int,
            default=2048,
            help="Logs followed at once by this replica (one thread each, beside its stream's).",
        )

    def handle(
        self,
        *args: Any,
        poll_seconds: float,
        resync_seconds: float,
        log_seconds: float,
        log_threads: int,
        **options: Any,
    ) -> None:
        stop = threading.Event()
        shard = Shard()
        writers = LogWriters(settings.LOG_WRITERS)
        collector = LogCollector(
            interval_s=log_seconds,
            threads=log_threads,
            shard=shard,
            collect=follow_while_owned(shard, stop, db=writers.run),
        )
        logs = threading.Thread(
            target=_collect, args=(collector, writers, stop), name="logs", daemon=True
        )

        def shut_down(*_: object) -> None:
            # At once, not at the next event: the main thread may be waiting on a watch for
            # half a minute. What it was recording rolls back; the sweep converges anyway.
            stop.set()
            raise SystemExit(0)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, shut_down)
        leader = leadership(WATCH_LEASE)
        leader.start(stop)
        logs.start()
        try:
            watch_while_leading(
                stop, leader, record=self._record, poll_s=poll_seconds, resync_s=resync_seconds
            )
        finally:
            stop.set()
            leader.join()  # the Lease let go: the next replica takes over at once
            logs.join(5)  # its share of the logs let go too

    def _record(self, observed: ObservedWorkload) -> None:
        close_old_connections()
        try:
            record_observation(observed)
        except DeployError as exc:
            log.warning("recording %s failed: %s", observed.id, exc)
        except Exception:  # a database or broker outage: the watch goes on, the sweep repairs
            log.exception("recording %s failed", observed.id)


def watch_while_leading(
    stop: threading.Event,
    leader: Leadership,
    *,
    record: Callable[[ObservedWorkload], None],
    poll_s: float,
    resync_s: float,
) -> None:
    """Until `stop`: wait for the Lease, then watch for as long as it is held (a term). An
    observation that arrives after the Lease was lost is not recorded: the next leader's
    relist records it."""
    while leader.wait_leading(stop):
        term = threading.Event()
        ender = threading.Thread(target=_end_term, args=(stop, leader, term), daemon=True)
        ender.start()
        try:
            for observed in _observations(term, poll_s, resync_s):
                if not leader.leading():
                    break
                record(observed)
        finally:
            term.set()
            ender.join()


def _collect(collector: LogCollector, writers: LogWriters, stop: threading.Event) -> None:
    """The collector and its writers, on threads of their own until `stop`: their connections
    close with them."""
    try:
        with writers:
            collector.run(stop)
    finally:
        connections.close_all()


def _end_term(stop: threading.Event, leader: Leadership, term: threading.Event) -> None:
    while not term.is_set() and not stop.is_set() and leader.leading():
        term.wait(leader.retry_s)
    term.set()


def _observations(
    term: threading.Event, poll_s: float, resync_s: float
) -> Iterator[ObservedWorkload]:
    backend = get_backend()
    if hasattr(backend, "watch"):
        yield from backend.watch(stop=term, resync_s=resync_s)
        return
    while not term.wait(poll_s):
        try:
            yield from backend.observe_all()
        except DeployError as exc:
            log.warning("listing workloads failed: %s", exc)
