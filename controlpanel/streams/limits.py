"""A bounded number of open streams per user, across every web process: a sorted set in Redis
per user, each open stream a member whose score is when it lapses (a process that died without
saying goodbye frees its slots after STREAM_LAPSE_S). Heartbeats keep a stream's slot."""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.conf import settings

from controlpanel.streams.hub import hub

LAPSE_MARGIN_S = 30.0


class Refused(Exception):
    """An answer instead of a stream: its status and its sentence."""

    def __init__(
        self, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        super().__init__(text)
        self.status, self.text, self.headers = status, text, headers or []


def _key(user_id: object) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:streams:user:{user_id}"


class Slot:
    """One of a user's open streams."""

    def __init__(self, key: str, member: str) -> None:
        self.key, self.member = key, member

    @staticmethod
    def _lapse() -> float:
        return time.time() + settings.STREAMS_HEARTBEAT_SECONDS + LAPSE_MARGIN_S

    @classmethod
    async def take(cls, user_id: object) -> Slot:
        redis: Any = hub().redis
        key, member, limit = _key(user_id), uuid.uuid4().hex, settings.STREAMS_MAX_PER_USER
        async with redis.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(key, 0, time.time())
            pipe.zadd(key, {member: cls._lapse()})
            pipe.zcard(key)
            pipe.expire(key, int(settings.STREAMS_HEARTBEAT_SECONDS + LAPSE_MARGIN_S) + 1)
            _, _, count, _ = await pipe.execute()
        if count > limit:
            await redis.zrem(key, member)
            raise Refused(
                429,
                f"You have {limit} live streams open, the most one person may: close a tab that "
                "follows a log, then reload this one.",
            )
        return cls(key, member)

    async def keep(self) -> None:
        redis: Any = hub().redis
        await redis.zadd(self.key, {self.member: self._lapse()})
        await redis.expire(self.key, int(settings.STREAMS_HEARTBEAT_SECONDS + LAPSE_MARGIN_S) + 1)

    async def release(self) -> None:
        await hub().redis.zrem(self.key, self.member)
