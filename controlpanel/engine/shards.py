"""Log collection spread over the watcher's replicas (issue 26).

Every watcher replica collects logs, each the workloads it owns. A replica announces itself
in Redis (a sorted set scored by its last heartbeat, `beat()` every `LOG_SHARD_BEAT_SECONDS`);
the live members are those seen within `LOG_SHARD_TTL_SECONDS`. A workload belongs to the
member with the highest hash of (member, workload) (rendezvous hashing): every replica computes
the same owner from the same members, and a member joining or leaving moves only its own share.
A replica that dies stops beating; within the TTL the others see it gone and take its
workloads over, from the cursor stored with the last lines (`collect_logs` stores a batch only
if the cursor it read from is still the row's: two replicas reading one log for a moment during
a hand-over store each line once).

Redis unreachable: the replica keeps the members it last saw, and alone it owns everything.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time

import redis
from django.conf import settings

from controlpanel.engine.leader import contender_identity

log = logging.getLogger(__name__)


def _key() -> str:
    return f"{settings.REDIS_KEY_PREFIX}:log-shards"


def owner(job_id: str, members: list[str]) -> str | None:
    """The member that collects `job_id`'s log (None without members)."""

    def weight(member: str) -> bytes:
        return hashlib.blake2b(f"{member}|{job_id}".encode(), digest_size=8).digest()

    return max(members, key=weight) if members else None


class Shard:
    """This replica's membership: who else collects, and which workloads are its own."""

    def __init__(self, *, identity: str | None = None, ttl_s: float | None = None) -> None:
        self.identity = identity or contender_identity()
        self.ttl_s = ttl_s if ttl_s is not None else settings.LOG_SHARD_TTL_SECONDS
        self.members: list[str] = [self.identity]
        self._redis = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2.0)

    def beat(self) -> list[str]:
        """Renew this replica's membership; the live members, this one included."""
        now = time.time()
        try:
            pipe = self._redis.pipeline()
            pipe.zadd(_key(), {self.identity: now})
            pipe.zremrangebyscore(_key(), "-inf", now - self.ttl_s)
            pipe.zrange(_key(), 0, -1)
            *_, found = pipe.execute()
        except redis.RedisError as exc:
            log.warning(
                "log shard heartbeat failed (%s); keeping %d members", exc, len(self.members)
            )
            return self.members
        members = sorted({item.decode() for item in found} | {self.identity})
        if members != self.members:
            log.info("log collectors now: %s", ", ".join(members))
        self.members = members
        return members

    def owns(self, job_id: str) -> bool:
        return owner(job_id, self.members) == self.identity

    def leave(self) -> None:
        """Let the others take this replica's share at once (a clean shutdown)."""
        with contextlib.suppress(redis.RedisError):  # else its heartbeat expires within the TTL
            self._redis.zrem(_key(), self.identity)
