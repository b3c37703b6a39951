"""The bounds on "Try it" (issue 25): an app's server must not pin a web thread. Each try has
a total deadline (TRY_IT_DEADLINE_SECONDS, from the click to the answer's last byte), and a
person has at most TRY_IT_PER_USER tries open at once, across every web process.

The deadline is kept by a timer that shuts the connection's socket down when it passes: a read
blocked on a server that trickles one byte at a time wakes up at once, whatever httpx's read
timeout. The open tries are a sorted set in Redis per user (as controlpanel/streams/limits.py
counts open streams): each try a member whose score is when it lapses, so a process that died
mid-try frees its slot on its own once its deadline is long past.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from typing import Any

import httpx
import redis
from django.conf import settings

from controlpanel.core.metrics.store import client

LAPSE_MARGIN_S = 30


class TryRefused(Exception):
    """Why a try cannot be sent: the HTTP status and the message the page shows."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _key(user_id: object) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:try-it:user:{user_id}"


def slot_take(user_id: object, *, now: float | None = None) -> str:
    """Hold one of the user's TRY_IT_PER_USER slots: its name, or TryRefused(429) saying why."""
    now = time.time() if now is None else now
    key, member, limit = _key(user_id), uuid.uuid4().hex, settings.TRY_IT_PER_USER
    lapse = settings.TRY_IT_DEADLINE_SECONDS + LAPSE_MARGIN_S
    try:
        pipe = client(settings.REDIS_URL).pipeline(transaction=True)
        pipe.zremrangebyscore(key, 0, now)
        pipe.zadd(key, {member: now + lapse})
        pipe.zcard(key)
        pipe.expire(key, lapse + 1)
        count = pipe.execute()[2]
        if count > limit:
            client(settings.REDIS_URL).zrem(key, member)
    except redis.RedisError:
        raise TryRefused(503, "Try it is unavailable: the panel cannot reach Redis.") from None
    if count > limit:
        raise TryRefused(
            429,
            f"You already have {limit} tries waiting for an answer, the most one person may: "
            "wait for one to finish, then send again.",
        )
    return member


def slot_release(user_id: object, member: str) -> None:
    with contextlib.suppress(redis.RedisError):  # else the slot lapses on its own
        client(settings.REDIS_URL).zrem(_key(user_id), member)


class Guard:
    """One try's slot and deadline, from the click on; `done()` gives both back (once)."""

    def __init__(self, user_id: object) -> None:
        self.seconds: int = settings.TRY_IT_DEADLINE_SECONDS
        self._ends = time.monotonic() + self.seconds
        self._user_id = user_id
        self._slot: str | None = slot_take(user_id)
        self._timer: threading.Timer | None = None
        self._cut = False

    def remaining(self) -> float:
        return max(0.001, self._ends - time.monotonic())

    @property
    def passed(self) -> bool:
        return self._cut or time.monotonic() >= self._ends

    def timeout(self) -> httpx.Timeout:
        """For the request up to the answer's headers: nothing waits past the deadline."""
        left = self.remaining()
        return httpx.Timeout(connect=min(5.0, left), read=left, write=left, pool=min(5.0, left))

    def watch(self, answer: httpx.Response) -> None:
        """Shut the answer's connection down when the deadline passes."""
        stream: Any = answer.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        self._timer = threading.Timer(self.remaining(), self._shut, (sock, answer))
        self._timer.daemon = True
        self._timer.start()

    def _shut(self, sock: socket.socket | None, answer: httpx.Response) -> None:
        self._cut = True
        if sock is None:  # no socket to wake: closing the answer is all there is
            answer.close()
            return
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)

    def done(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._slot is not None:
            slot_release(self._user_id, self._slot)
            self._slot = None
