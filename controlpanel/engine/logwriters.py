"""The log collection's database work, on a few threads (issue 26).

A followed log is a thread that waits on its stream for as long as the workload prints. Were
it to store its batches itself, it would hold a PostgreSQL connection for the stream's whole
life: a thousand printing workloads, a thousand connections (`max_connections` is 100 by
default). So the readers never touch the database: each hands its database steps (load the
row, store a batch through `logs._commit`'s cursor check) to `LogWriters`, a fixed set of
`LOG_WRITERS` threads, each with one connection (kept: it is not a request's, and
`DATABASE_CONN_MAX_AGE` does not close it), and waits for the step's result. A reader has
at most one step queued, so its batches are stored in the order it read them; while it waits,
its stream goes on filling its inbox, and the next batch is larger (batches grow with the
writers' backlog, up to `follow.BATCH_LINES` lines, instead of connections growing with the
logs).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from django.db import close_old_connections, connections

log = logging.getLogger(__name__)

T = TypeVar("T")
# How a reader runs a database step: here, or on a writer thread (`LogWriters.run`).
Db = Callable[[Callable[[], Any]], Any]


def here(step: Callable[[], T]) -> T:
    """A database step on the calling thread (a short read: the finalize task, a page)."""
    return step()


class WritersStopped(RuntimeError):
    """The writers were stopped (the replica shuts down): the step was not run."""


class LogWriters:
    """`count` threads that run the readers' database steps, one connection each."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("LogWriters needs at least one writer thread.")
        self.count = count
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None]
        self._queue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> LogWriters:
        for i in range(self.count):
            thread = threading.Thread(target=self._work, name=f"log-writer-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def run(self, step: Callable[[], T]) -> T:
        """Run `step` on a writer thread and return its result (or raise its error)."""
        future: Future[T] = Future()
        with self._lock:
            if self._stopped or not self._threads:
                raise WritersStopped("the log writers are not running")
            self._queue.put((step, future))
        return future.result()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Run the steps already queued, then end the threads (their connections close)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            for _ in self._threads:
                self._queue.put(None)  # after every step queued before: those run first
        for thread in self._threads:
            thread.join(timeout_s)

    def __enter__(self) -> LogWriters:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _work(self) -> None:
        try:
            while (item := self._queue.get()) is not None:
                step, future = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = step()
                except BaseException as exc:  # the reader that queued it logs it
                    future.set_exception(exc)
                    close_old_connections()  # a broken connection is opened again
                else:
                    future.set_result(result)
        finally:
            connections.close_all()
