"""`manage.py watch_workloads`: follow the backend's workloads and record changes as they
happen (the Procfile's `watcher`). The Kubernetes backend lists then watches pods; a backend
without a watch is polled. The beat sweep stays the safety net: either alone converges.

Beside the watch, the same process runs the log collector (collector.py): the log of every
running workload is stored as it is printed, watched or not."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from controlpanel.engine.backend import get_backend
from controlpanel.engine.collector import LogCollector
from controlpanel.engine.sweep import record_observation
from deploy.types import DeployError

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

    def handle(
        self,
        *args: Any,
        poll_seconds: float,
        resync_seconds: float,
        log_seconds: float,
        **options: Any,
    ) -> None:
        stop = threading.Event()

        def shut_down(*_: object) -> None:
            # At once, not at the next event: the main thread may be waiting on a watch for
            # half a minute. What it was recording rolls back; the sweep converges anyway.
            stop.set()
            raise SystemExit(0)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, shut_down)
        collector = LogCollector(interval_s=log_seconds)
        threading.Thread(target=collector.run, args=(stop,), name="logs", daemon=True).start()
        backend = get_backend()
        if hasattr(backend, "watch"):
            for observed in backend.watch(stop=stop, resync_s=resync_seconds):
                self._record(observed)
        else:
            while not stop.wait(poll_seconds):
                try:
                    for observed in backend.observe_all():
                        self._record(observed)
                except DeployError as exc:
                    log.warning("listing workloads failed: %s", exc)

    def _record(self, observed: Any) -> None:
        close_old_connections()
        try:
            record_observation(observed)
        except DeployError as exc:
            log.warning("recording %s failed: %s", observed.id, exc)
        except Exception:  # a database or broker outage: the watch goes on, the sweep repairs
            log.exception("recording %s failed", observed.id)
