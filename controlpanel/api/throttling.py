"""API throttling per token and per user (settings API_THROTTLE_TOKEN and API_THROTTLE_USER).

Each request counts once against its token (a token's own limit, so that one runaway script
does not use up its owner's other tokens) and once against its user (every token and the
browser session together). Counters live in the Django cache, Redis, so every web process
shares them; each is one atomic INCR on a key per fixed window, which expires with it. Past the
limit the API answers 429 with Retry-After: the seconds until the window ends."""

from __future__ import annotations

import math
import time
from typing import Any

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
    """Adds one to the window's counter and returns it (atomic across processes)."""
    for _ in range(2):
        cache.add(key, 0, timeout=rate.seconds + 1)
        try:
            return cache.incr(key)
        except ValueError:  # the window's key expired between add and incr: a new one
            continue
    return 1


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
