"""A project's stream: `GET /p/<slug>/events/`, what its lists, dashboard and status blocks
follow instead of polling.

It carries no rows, only notices: an event `changed` (data: the workloads that changed and
what changed of each) when a workload of the project is created, changes state or progress,
reports activity or is deleted. The page then asks for its fragment again, as its poll did,
through the same views and the same access checks. Notices are coalesced: at most one event
per COALESCE_S per stream, the first one at once and the last one never dropped, so a burst of
submissions costs each page a request every 2 s at most, as its poll did (at 1 s a busy
project's lists were re-rendered twice as often as they had been polled, #27). The stream
ends with an `end` event when the viewer loses the project, logs out or is deactivated
(streams/viewer.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from django.http import Http404

from controlpanel.projects.access import project_access
from controlpanel.streams import hub as hubs
from controlpanel.streams.channels import project_channel, user_channel
from controlpanel.streams.feed import Guard, _read, event
from controlpanel.streams.viewer import Viewer

COALESCE_S = 2.0
MAX_IDS = 50  # more changed at once: the page refreshes all it shows anyway


def _project_id(user: Any, slug: str) -> int | None:
    """The project's id if `user` may see it (the pages' own check), else None."""
    try:
        return project_access(user=user, slug=slug).project.pk
    except Http404:
        return None


project_watched = _read(_project_id)


class ProjectStream:
    """The notices of one viewer's project stream (`events()`); the site's stream
    (streams/site.py) is one with other channels, another guard and capacity notices."""

    def __init__(self, viewer: Viewer, project_id: int, slug: str, heartbeat_s: float) -> None:
        self.viewer, self.heartbeat_s = viewer, heartbeat_s
        self.ready: dict[str, Any] = {"project": slug}
        self.guard: Any = Guard(viewer, slug)
        self.channels = [project_channel(project_id), user_channel(viewer.user.pk)]
        self.on_heartbeat: Callable[[], Awaitable[None]] | None = None
        self.pending: dict[str, list[str]] = {}
        self.capacity = False  # a new capacity reading (the site's stream only)
        self.sent_at = 0.0

    async def events(self) -> AsyncGenerator[bytes]:
        hub = hubs.hub()
        queue = await hub.join(self.channels)
        try:
            yield b"retry: 2000\n\n"
            yield event("ready", self.ready)
            while True:
                wait = self.heartbeat_s
                if self.pending or self.capacity:
                    wait = max(0.0, self.sent_at + COALESCE_S - time.monotonic())
                try:
                    message = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    if self.pending or self.capacity:
                        yield self._flush()
                        continue
                    yield b": keep-alive\n\n"
                    if self.on_heartbeat is not None:
                        await self.on_heartbeat()
                    message = {"t": "recheck"}
                kind = message.get("t")
                if kind == "broken":  # the browser reconnects
                    return
                if kind in ("access", "revoke", "recheck"):
                    why = await self.guard.lost(None if kind == "recheck" else message)
                    if why is not None:
                        yield event("end", {"reason": why})
                        return
                elif kind in ("changed", "capacity"):
                    self._note(message)
                    if time.monotonic() - self.sent_at >= COALESCE_S:
                        yield self._flush()
        finally:
            await hub.leave(self.channels, queue)

    def _note(self, message: dict[str, Any]) -> None:
        if message.get("t") == "capacity":
            self.capacity = True
            return
        what = self.pending.setdefault(str(message.get("id")), [])
        if message.get("what") not in what:
            what.append(str(message.get("what")))

    def _flush(self) -> bytes:
        changed = [{"id": key, "what": what} for key, what in self.pending.items()]
        data: dict[str, Any] = {"workloads": changed[:MAX_IDS], "more": len(changed) > MAX_IDS}
        if self.capacity:
            data["capacity"] = True
        self.pending, self.capacity, self.sent_at = {}, False, time.monotonic()
        return event("changed", data)
