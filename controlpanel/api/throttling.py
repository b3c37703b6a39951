"""API throttling per token and per user (settings API_THROTTLE_TOKEN and API_THROTTLE_USER).

Each request counts once against its token (a token's own limit, so that one runaway script
does not use up its owner's other tokens) and once against its user (every token and the
browser session together). Counters live in the Django cache, Redis, so every web process
shares them; each is one atomic INCR on a key per fixed window, which expires after it. Past the
limit the API answers 429 with Retry-After: the seconds until the window ends."""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import redis
from django.conf import settings
from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from controlpanel.accounts.models import ApiToken
from controlpanel.api.rates import Rate, parse_rate


def window_key(scope: str, ident: object, rate: Rate, now: float) -> str:
    """The cache key counting `ident`'s requests in the window that holds `now`."""
    return f"throttle:{scope}:{ident}:{rate.seconds}:{int(now // rate.seconds)}"


def count_request(key: str, rate: Rate) -> int:
    """Adds one to the window's counter and returns it (atomic across processes), in one
    round trip: INCR, then EXPIRE. Each request renews the key's life, so a key outlives its
    window by at most one more, and no later window reads it (the window is in its name).
    Through the cache's own key (`make_key`), so the cache API reads and resets the counts."""
    full = cache.make_key(key)
    pipe = _client(settings.CACHES["default"]["LOCATION"]).pipeline(transaction=False)
    pipe.incr(full)
    pipe.expire(full, rate.seconds + 1)
    count, _ = pipe.execute()
    return int(count)


@functools.cache
def _client(url: str) -> redis.Redis:
    """The throttles' connection pool (the cache's is private to Django's backend): one per
    process. Django's `cache.add` and `cache.incr` took three round trips a throttle (#27)."""
    return redis.Redis.from_url(url)


class _WindowThrottle(BaseThrottle):
    scope = ""
    setting = ""

    def __init__(self) -> None:
        self.retry_after: int | None = None

    def ident(self, request: Request) -> object | None:
        raise NotImplementedError

    def allow_request(self, request: Request, view: Any) -> bool:
        rate = parse_rate(getattr(settings, self.setting))
        ident = self.ident(request)
        if rate is None or ident is None:
            return True
        now = time.time()
        if count_request(window_key(self.scope, ident, rate, now), rate) <= rate.count:
            return True
        window_end = (now // rate.seconds + 1) * rate.seconds
        self.retry_after = max(1, math.ceil(window_end - now))
        return False

    def wait(self) -> float | None:
        return self.retry_after


class TokenRateThrottle(_WindowThrottle):
    """API_THROTTLE_TOKEN: the requests one API token may make (session requests are not
    counted here)."""

    scope = "token"
    setting = "API_THROTTLE_TOKEN"

    def ident(self, request: Request) -> object | None:
        return request.auth.pk if isinstance(request.auth, ApiToken) else None


class UserRateThrottle(_WindowThrottle):
    """API_THROTTLE_USER: the requests one user may make, all tokens and the session together."""

    scope = "user"
    setting = "API_THROTTLE_USER"

    def ident(self, request: Request) -> object | None:
        user = request.user
        return user.pk if user is not None and user.is_authenticated else None
