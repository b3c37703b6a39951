"""The publish point: the one place that tells open streams what was just stored.

The log collector (engine/logs.py) and `record_state` (engine/lifecycle.py) call these inside
the transaction that stores the lines or the state; the message leaves once it commits, so a
stream never shows what a rollback took back. A message is a notice, not the truth: a stream
that misses one (Redis away, a slow reader) reads the rows again, and nothing is lost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import cache
from typing import Any

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

log = logging.getLogger(__name__)

# Lines carried in one message; a bigger chunk is announced only (its streams read the rows).
MAX_LINES_PER_MESSAGE = 200
MAX_BYTES_PER_MESSAGE = 64 * 1024


def workload_channel(workload_id: object) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:stream:workload:{workload_id}"


def project_channel(project_id: object) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:stream:project:{project_id}"


def user_channel(user_id: object) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:stream:user:{user_id}"


def site_channel() -> str:
    """Every project's workload notices and the capacity readings: the site admins' pages."""
    return f"{settings.REDIS_KEY_PREFIX}:stream:site"


@cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def _send(*messages: tuple[str, dict[str, Any]]) -> None:
    """Publish each (channel, message), in one round trip."""
    try:
        pipe = _client(settings.REDIS_URL).pipeline(transaction=False)
        for channel, message in messages:
            pipe.publish(channel, json.dumps(message, separators=(",", ":")))
        pipe.execute()
    except redis.RedisError as exc:  # streams fall back to the rows; collection goes on
        log.warning("publishing to %s failed: %s", messages[0][0], exc)


def _after_commit(channel: str, message: dict[str, Any], *more: tuple[str, dict[str, Any]]) -> None:
    transaction.on_commit(lambda: _send((channel, message), *more))


def lines_stored(*, workload_id: object, run: int, first: int, texts: Sequence[str]) -> None:
    """Lines `first`..`first + len(texts) - 1` of `run` were stored."""
    if not texts:
        return
    carried: list[str] | None = list(texts)
    if len(texts) > MAX_LINES_PER_MESSAGE or sum(map(len, texts)) > MAX_BYTES_PER_MESSAGE:
        carried = None
    message = {
        "t": "lines",
        "run": run,
        "first": first,
        "last": first + len(texts) - 1,
        "lines": carried,
        "time": timezone.now().isoformat(),
    }
    _after_commit(workload_channel(workload_id), message)


def state_recorded(
    *,
    workload_id: object,
    project_id: object = None,
    run: int,
    state: str,
    reason: str,
    at: Any,
    final: bool,
) -> None:
    """The workload's stream gets the state; its project's streams (lists, dashboards) a
    notice that it changed."""
    message = {
        "t": "state",
        "run": run,
        "state": state,
        "reason": reason,
        "at": at.isoformat() if at else None,
        "final": final,
    }
    if project_id is None:
        _after_commit(workload_channel(workload_id), message)
        return
    changed = _changed(workload_id, "state", state)
    _after_commit(
        workload_channel(workload_id),
        message,
        (project_channel(project_id), changed),
        (site_channel(), changed),
    )


def _changed(workload_id: object, what: str, state: str | None = None) -> dict[str, Any]:
    return {"t": "changed", "id": str(workload_id), "what": what, "state": state}


def workload_changed(*, project_id: object, workload_id: object, what: str) -> None:
    """Something a list, a dashboard or a status block shows changed (`what`: new, progress,
    activity, deleted); the project's streams refresh what they show."""
    changed = _changed(workload_id, what)
    _after_commit(project_channel(project_id), changed, (site_channel(), changed))


def capacity_read() -> None:
    """The periodic task kept a new capacity reading (or a failure, or Kueue's queues): the
    capacity view's streams refresh it."""
    _after_commit(site_channel(), {"t": "capacity"})


def log_archived(*, workload_id: object, run: int) -> None:
    """The run's log is complete: its streams send what is left, then `end`."""
    _after_commit(workload_channel(workload_id), {"t": "end", "run": run})


def member_removed(*, project_id: object, user_id: object) -> None:
    """The user lost the project: their open streams of it end."""
    _after_commit(project_channel(project_id), {"t": "access", "user": str(user_id)})


def access_changed(*, user_id: object, session_key: str | None = None) -> None:
    """The user's access may be gone (logged out: `session_key`; deactivated, or the projects
    an SSO sign-in maps changed: every session). Their open streams check it again at once."""
    _after_commit(user_channel(user_id), {"t": "revoke", "session": session_key})
