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


def count_requests(windows: list[tuple[str, Rate]]) -> list[int]:
    """Adds one to each window's counter and returns the counts (atomic across processes), all
    in one round trip: INCR, then EXPIRE. Each request renews a key's life, so a key outlives
    its window by at most one more, and no later window reads it (the window is in its name).
    Through the cache's own keys (`make_key`), so the cache API reads and resets the counts."""
    if not windows:
        return []
    pipe = _client(settings.CACHES["default"]["LOCATION"]).pipeline(transaction=False)
    for key, rate in windows:
        full = cache.make_key(key)
        pipe.incr(full)
        pipe.expire(full, rate.seconds + 1)
    return [int(count) for count in pipe.execute()[::2]]


@functools.cache
def _client(url: str) -> redis.Redis:
    """The throttle's connection pool (the cache's is private to Django's backend): one per
    process. Django's `cache.add` and `cache.incr` took three round trips a limit (#27)."""
    return redis.Redis.from_url(url)


def _limits(request: Request) -> list[tuple[str, object, Rate]]:
    """(scope, ident, rate) of each limit that applies: the token's when the request brings
    one, the user's when signed in; none that is "off"."""
    token = request.auth.pk if isinstance(request.auth, ApiToken) else None
    user = request.user
    who = user.pk if user is not None and user.is_authenticated else None
    found: list[tuple[str, object, Rate]] = []
    for scope, ident, setting in (
        ("token", token, "API_THROTTLE_TOKEN"),
        ("user", who, "API_THROTTLE_USER"),
    ):
        rate = parse_rate(getattr(settings, setting))
        if rate is not None and ident is not None:
            found.append((scope, ident, rate))
    return found


class ApiRateThrottle(BaseThrottle):
    """API_THROTTLE_TOKEN, the requests one API token may make (session requests are not
    counted there), and API_THROTTLE_USER, the requests one user may make, all tokens and the
    session together: both counted at every request, in one round trip; past either, a 429
    whose Retry-After is the longest wait."""

    def __init__(self) -> None:
        self.retry_after: int | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        now = time.time()
        limits = _limits(request)
        counts = count_requests([(window_key(s, i, rate, now), rate) for s, i, rate in limits])
        over = [
            rate for (_, _, rate), count in zip(limits, counts, strict=True) if count > rate.count
        ]
        if not over:
            return True
        self.retry_after = max(
            max(1, math.ceil((now // rate.seconds + 1) * rate.seconds - now)) for rate in over
        )
        return False

    def wait(self) -> float | None:
        return self.retry_after
