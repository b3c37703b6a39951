"""The user-content gateway's budgets, kept by the panel's own proxy under `make run` (the local
backend), issue 25: the same knobs and defaults as images/gateway (AJUSTE_GATEWAY_RATE/_BURST
per client address, _KEY_RATE/_KEY_BURST per Authorization header, _SIGNIN_RATE/_SIGNIN_BURST
on the ticket exchange per address, a minute) and the same answer past one: 429, Retry-After: 1,
a sentence (text for notebooks, an OpenAI rate_limit_error for apps), the gate not asked.

Each budget is a token bucket in Redis, shared by every web process: it holds BURST + 1
requests (nginx's limit_req with `burst=BURST nodelay` lets BURST pass at once beside the one
the rate allows) and refills at RATE a second. One Lua script takes a token from each of the
request's buckets, or from none when any is empty, so a refused request spends nothing.
Authorization headers are keyed by their SHA-256, never stored. Without Redis the proxy lets
requests through (logged): a throttle that fails must not take every notebook down with it."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import redis
from django.conf import settings
from django.http import HttpResponse
from django.utils.module_loading import import_string

from controlpanel.core.metrics.store import client
from controlpanel.usercontent.hosts import parse_host
from controlpanel.usercontent.views import refusal_text

logger = logging.getLogger(__name__)

TEXT = "Too many requests from your address: wait a moment, then try again."
JSON = (
    '{"error": {"message": "Too many requests from this address or token: wait a moment, '
    'then try again.", "type": "rate_limit_error", "code": "rate_limited"}}'
)

# KEYS: the buckets; ARGV: now (seconds), then each bucket's rate (a second) and capacity.
# Returns 0 when a token was taken from every bucket, else the 1-based index of an empty one.
TAKE = """
local now = tonumber(ARGV[1])
local levels = {}
for i, key in ipairs(KEYS) do
  local rate, capacity = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local tokens, at = tonumber(state[1]) or capacity, tonumber(state[2]) or now
  tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
  if tokens < 1 then return i end
  levels[i] = tokens
end
for i, key in ipairs(KEYS) do
  local rate, capacity = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  redis.call('HSET', key, 'tokens', tostring(levels[i] - 1), 'at', tostring(now))
  redis.call('PEXPIRE', key, math.ceil(capacity / rate * 1000) + 1000)
end
return 0
"""


@dataclass(frozen=True)
class Bucket:
    """One budget for one caller: its Redis key, refill a second and capacity."""

    key: str
    rate: float
    capacity: int


def bucket(name: str, ident: str, *, rate: float, burst: int) -> Bucket:
    key = f"{settings.REDIS_KEY_PREFIX}:usercontent-throttle:{name}:{ident}"
    return Bucket(key=key, rate=rate, capacity=burst + 1)


def take(buckets: Sequence[Bucket], *, now: float | None = None) -> bool:
    """Whether the request may pass: a token from each bucket, or none taken at all."""
    if not buckets:
        return True
    now = time.time() if now is None else now
    args: list[Any] = [repr(now)]
    for one in buckets:
        args += [repr(one.rate), one.capacity]
    try:
        script = client(settings.REDIS_URL).register_script(TAKE)
        empty = script(keys=[one.key for one in buckets], args=args)
    except redis.RedisError as exc:
        logger.warning("user-content throttle not kept (Redis: %s): request let through", exc)
        return True
    return int(empty) == 0


def buckets_for(meta: Mapping[str, Any], *, signin: bool) -> list[Bucket]:
    """The budgets one request to a content host counts against (the gateway's locations):
    the ticket exchange its address's and the sign-in's, any other its address's and its
    Authorization header's, if it has one."""
    address = client_address(meta)
    found = [
        bucket(
            "address",
            address,
            rate=settings.AJUSTE_GATEWAY_RATE,
            burst=settings.AJUSTE_GATEWAY_BURST,
        )
    ]
    if signin:
        rate = settings.AJUSTE_GATEWAY_SIGNIN_RATE / 60
        found.append(
            bucket("signin", address, rate=rate, burst=settings.AJUSTE_GATEWAY_SIGNIN_BURST)
        )
        return found
    authorization = str(meta.get("HTTP_AUTHORIZATION", ""))
    if authorization:
        digest = hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()
        found.append(
            bucket(
                "key",
                digest,
                rate=settings.AJUSTE_GATEWAY_KEY_RATE,
                burst=settings.AJUSTE_GATEWAY_KEY_BURST,
            )
        )
    return found


def client_address(meta: Mapping[str, Any]) -> str:
    """The connection's address, or X-Forwarded-For's as log-in throttling takes it
    (BEHIND_PROXY=1, controlpanel/accounts/client_ip.py)."""
    path = getattr(settings, "AXES_CLIENT_IP_CALLABLE", None)
    address = import_string(path)(SimpleNamespace(META=meta)) if path else meta.get("REMOTE_ADDR")
    return str(address or "unknown")


def throttled(meta: Mapping[str, Any], *, signin: bool) -> bool:
    return not take(buckets_for(meta, signin=signin))


def too_many(meta: Mapping[str, Any], *, signin: bool) -> HttpResponse:
    """The gateway's 429: a JSON rate_limit_error on an app's host (not its ticket exchange),
    a sentence everywhere else."""
    host = parse_host(str(meta.get("HTTP_HOST", "")))
    if not signin and host is not None and host.prefix == "app":
        response = HttpResponse(JSON + "\n", status=429)
        response["Content-Type"] = "application/json"
        response["Cache-Control"] = "no-store"
    else:
        response = refusal_text(429, TEXT)
    response["Retry-After"] = "1"
    return response
