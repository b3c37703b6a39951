"""One Redis subscription per web process, fanned out to every open stream.

A stream asks the hub for its channels and gets an asyncio queue; the hub subscribes a channel
when its first stream arrives and unsubscribes it when its last one leaves. 1,000 streams cost
one Redis connection, and a stream that waits costs nothing but its queue. If Redis breaks,
every queue gets `BROKEN` and its stream ends; browsers reconnect with Last-Event-ID and lose
nothing (the rows are the truth).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings

from controlpanel.engine.collector import note_followed_many
from controlpanel.streams.channels import workload_channel

log = logging.getLogger(__name__)

BROKEN: dict[str, Any] = {"t": "broken"}
QUEUE_SIZE = 256  # a stream this far behind drops notices and reads the rows instead
FOLLOW_EVERY_S = 1.0  # within the collector's FOLLOWED_S


class Hub:
    """The process's subscriber (one per event loop: uvicorn runs one per worker)."""

    def __init__(self, url: str) -> None:
        self.redis = aioredis.Redis.from_url(url)
        self._pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self._queues: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def join(self, channels: list[str]) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        async with self._lock:
            new = [channel for channel in channels if channel not in self._queues]
            for channel in channels:
                self._queues.setdefault(channel, set()).add(queue)
            if new:
                await self._pubsub.subscribe(*new)
            if self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read())
            if self._follower is None or self._follower.done():
                self._follower = asyncio.create_task(self._follow())
        return queue

    async def leave(self, channels: list[str], queue: asyncio.Queue[dict[str, Any]]) -> None:
        async with self._lock:
            gone = []
            for channel in channels:
                queues = self._queues.get(channel, set())
                queues.discard(queue)
                if not queues:
                    self._queues.pop(channel, None)
                    gone.append(channel)
            if gone and self._pubsub.connection is not None:
                # A broken connection: _read notices and ends the streams.
                with contextlib.suppress(aioredis.RedisError, OSError):
                    await self._pubsub.unsubscribe(*gone)

    async def _read(self) -> None:
        try:
            while self._queues:
                message = await self._pubsub.get_message(timeout=30.0)
                if message is not None and message.get("type") == "message":
                    self._deliver(message["channel"].decode(), json.loads(message["data"]))
        except (aioredis.RedisError, OSError) as exc:
            log.warning("the stream subscription broke: %s", exc)
            await self._break()

    async def _follow(self) -> None:
        """Every second, mark the streamed logs followed: the collector reads them every
        round, as it does a polled log (engine/collector.py)."""
        followed = sync_to_async(note_followed_many, thread_sensitive=False)
        marker = workload_channel("")
        while self._queues:
            ids = [channel[len(marker) :] for channel in self._queues if channel.startswith(marker)]
            try:
                await followed(ids)
            except Exception as exc:  # the cache away: the collector backs off, nothing lost
                log.warning("marking streamed logs followed failed: %s", exc)
            await asyncio.sleep(FOLLOW_EVERY_S)

    def _deliver(self, channel: str, payload: dict[str, Any]) -> None:
        for queue in list(self._queues.get(channel, ())):
            # A full queue: its stream reads the rows when it catches up.
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(payload)

    async def _break(self) -> None:
        async with self._lock:
            queues = {queue for queues in self._queues.values() for queue in queues}
            self._queues.clear()
            await self._pubsub.aclose()
            self._pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        for queue in queues:
            while True:
                try:
                    queue.put_nowait(BROKEN)
                    break
                except asyncio.QueueFull:
                    queue.get_nowait()


_hubs: dict[int, Hub] = {}


def hub() -> Hub:
    """This event loop's hub."""
    loop = id(asyncio.get_running_loop())
    if loop not in _hubs:
        _hubs[loop] = Hub(settings.REDIS_URL)
    return _hubs[loop]
