"""One stream: a workload's log lines from an offset, then live, with its state changes, until
its log ends or the viewer loses the project.

The stream joins its channels before it reads the rows, and keeps the number of the last line
it sent: a notice that arrives while the rows are read repeats nothing, a notice missed (a full
queue, lines too many to carry) is a gap read back from the rows, so nothing is lost. Rows are
read on the process's STREAMS_READ_THREADS threads (never a thread of its own) and the database
connection is closed after each read: an open stream holds no connection, and a process at most
STREAMS_READ_THREADS at once.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection
from django.http import Http404

from controlpanel.engine import logs
from controlpanel.engine.ansi import ansi_to_html
from controlpanel.engine.models import FINAL_STATES, JobLogLine, Workload
from controlpanel.projects.access import project_access
from controlpanel.streams import hub as hubs
from controlpanel.streams.channels import project_channel, user_channel, workload_channel
from controlpanel.streams.viewer import LOGGED_OUT, NO_ACCESS, Viewer, access_lost
from training.protocol import is_event

READ_BATCH = 500
__all__ = ["NO_ACCESS", "Guard", "Stream", "Watched", "event"]


@dataclass(frozen=True)
class Watched:
    """What a stream follows, as its first read found it."""

    workload_id: uuid.UUID
    project_id: int
    slug: str
    run: int  # the run followed
    current_run: int
    state: str
    reason: str
    over: bool  # its log is complete (an earlier run, or final and archived)


@cache
def _readers() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(settings.STREAMS_READ_THREADS, thread_name_prefix="stream-read")


def _read(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """A row read on the process's read threads, its connection closed afterwards."""

    def closed(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    async def read(*args: Any, **kwargs: Any) -> Any:
        run = sync_to_async(closed, thread_sensitive=False, executor=_readers())
        return await run(*args, **kwargs)

    return read


def _watched(user: Any, kind: str, workload_id: uuid.UUID, slug: str | None, run: Any) -> Watched:
    """The workload if `user` may read its log (the page's own check), else Http404."""
    workload = (
        Workload.objects.select_related("project")
        .filter(pk=workload_id, kind=kind)
        .only("run", "state", "state_reason", "logs_archived", "project__slug")
        .first()
    )
    if workload is None or (slug is not None and workload.project.slug != slug):
        raise Http404("No such workload.")
    project_access(user=user, slug=workload.project.slug)
    followed = workload.run if run is None else run
    if not 1 <= followed <= workload.run:
        raise Http404(f"This workload has no run {followed}: its runs are 1 to {workload.run}.")
    return Watched(
        workload_id=workload.pk,
        project_id=workload.project_id,
        slug=workload.project.slug,
        run=followed,
        current_run=workload.run,
        state=workload.state,
        reason=workload.state_reason,
        over=followed < workload.run or (workload.state in FINAL_STATES and workload.logs_archived),
    )


watched = _read(_watched)


@_read
def _rows(workload_id: uuid.UUID, run: int, after: int) -> tuple[list[tuple[int, str]], bool]:
    """Up to READ_BATCH lines after `after`, and whether the run's log is complete."""
    rows = list(
        JobLogLine.objects.filter(job_id=workload_id, run=run, seq__gt=after)
        .order_by("seq")
        .values_list("seq", "text")[:READ_BATCH]
    )
    now = Workload.objects.filter(pk=workload_id).values("run", "state", "logs_archived").first()
    if not rows and now is not None and (run < now["run"] or now["logs_archived"]):
        # An ended log may have moved to object storage (engine/logarchive.py).
        job = Workload(pk=workload_id, run=now["run"], logs_archived=now["logs_archived"])
        found = logs.lines_after(job=job, after=after, limit=READ_BATCH, run=run)
        rows = [(line.seq, line.text) for line in found]
    over = (
        now is None or run < now["run"] or (now["state"] in FINAL_STATES and now["logs_archived"])
    )
    return rows, over


_access_lost = _read(access_lost)


class Guard:
    """A stream's check of its viewer's access: when a message asks for it, and every
    STREAMS_RECHECK_SECONDS in case one was lost (a heartbeat calls `due`)."""

    def __init__(self, viewer: Viewer, slug: str) -> None:
        self.viewer, self.slug = viewer, slug
        self.checked = time.monotonic()

    async def lost(self, message: dict[str, Any] | None = None) -> str | None:
        """Why the stream must end now, or None."""
        if message is not None:
            if self.viewer.logged_out(message):
                return LOGGED_OUT
            if not self.viewer.concerned(message) or self.viewer.other_session(message):
                return None
        elif time.monotonic() - self.checked < settings.STREAMS_RECHECK_SECONDS:
            return None
        self.checked = time.monotonic()
        return await _access_lost(self.viewer, self.slug)


def event(name: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@lru_cache(maxsize=4096)  # one line goes to every viewer: encoded once per process
def line_event(seq: int, text: str, time: str | None) -> bytes:
    """A log line: its number (the event id), when it was stored when known, the text as
    printed, the text as the page draws it (escaped, colours as spans) and whether it is a
    progress event."""
    data = {
        "n": seq,
        "time": time,
        "text": text,
        "html": ansi_to_html(text),
        "event": is_event(text),
    }
    return event("line", data, seq)


def state_event(run: int, state: str, reason: str, at: str | None = None) -> bytes:
    final = state in FINAL_STATES
    return event("state", {"run": run, "state": state, "reason": reason, "at": at, "final": final})


class Stream:
    """The events of one viewer's stream (`events()`); `last` is the last line number sent."""

    def __init__(self, viewer: Viewer, watch: Watched, after: int, heartbeat_s: float) -> None:
        self.viewer, self.watch, self.last = viewer, watch, after
        self.guard = Guard(viewer, watch.slug)
        self.heartbeat_s = heartbeat_s
        self.channels = [
            workload_channel(watch.workload_id),
            project_channel(watch.project_id),
            user_channel(viewer.user.pk),
        ]
        self.on_heartbeat: Callable[[], Awaitable[None]] | None = None

    async def events(self) -> AsyncGenerator[bytes]:
        hub = hubs.hub()
        queue = await hub.join(self.channels)
        try:
            yield b"retry: 2000\n\n"
            yield state_event(self.watch.run, self.watch.state, self.watch.reason)
            over = False
            async for chunk in self._catch_up():
                yield chunk
            over = self._over
            while not over:
                try:
                    message = await asyncio.wait_for(queue.get(), self.heartbeat_s)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    if self.on_heartbeat is not None:
                        await self.on_heartbeat()
                    message = {"t": "recheck"}
                async for chunk in self._handle(message):
                    yield chunk
                over = self._over
        finally:
            await hub.leave(self.channels, queue)

    _over = False

    async def _catch_up(self) -> AsyncIterator[bytes]:
        """The rows after `last`; ends the stream with `end` once the log is complete."""
        while True:
            rows, over = await _rows(self.watch.workload_id, self.watch.run, self.last)
            for seq, text in rows:
                yield line_event(seq, text, None)
                self.last = seq
            if len(rows) < READ_BATCH:
                break
        if over:
            self._over = True
            yield event("end", {"run": self.watch.run, "lines": self.last})

    async def _handle(self, message: dict[str, Any]) -> AsyncIterator[bytes]:
        kind, run = message.get("t"), int(message.get("run") or 0)
        if kind == "broken":  # the browser reconnects from its Last-Event-ID
            self._over = True
        elif kind in ("access", "revoke", "recheck"):
            why = await self.guard.lost(None if kind == "recheck" else message)
            if why is not None:
                self._over = True
                yield event("end", {"run": self.watch.run, "reason": why})
        elif kind == "changed" and message.get("id") == str(self.watch.workload_id):
            if message.get("what") not in ("state", "new", "deleted"):  # state: its own event
                yield event("changed", {"what": message.get("what")})
        elif kind == "state":
            yield state_event(run, message["state"], message["reason"], message.get("at"))
            if run != self.watch.run:  # a new run began: this run's log is read to its end
                async for chunk in self._catch_up():
                    yield chunk
        elif kind == "end" and run == self.watch.run:
            async for chunk in self._catch_up():
                yield chunk
        elif kind == "lines" and run == self.watch.run and message["last"] > self.last:
            texts = message.get("lines")
            if texts is None or message["first"] > self.last + 1:  # a gap: the rows have it
                async for chunk in self._catch_up():
                    yield chunk
                return
            for seq, text in enumerate(texts, start=message["first"]):
                if seq > self.last:
                    yield line_event(seq, text, message.get("time"))
                    self.last = seq
