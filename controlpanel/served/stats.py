"""Request figures of each app, as its detail page shows them: requests per second over the
last minute and the last five, latency p50/p95 and the 5xx answers.

The local proxy (controlpanel/usercontent/proxy.py, `make run`) records every request to an
app it forwards, when its answer has been relayed (or the server failed to answer: a 502), in
one pipelined round trip to Redis:
a hash per app and 10-second slot, `<REDIS_KEY_PREFIX>:app-requests:<app id>:<slot>`, with
`n` (requests), `err` (5xx answers) and `b<i>` (requests whose duration falls in LATENCY
bucket i, i = len(LATENCY) for slower ones). Each hash expires an hour after its slot. Only
the app, the time, the duration and the status are written: never the caller, the token, the
path or the body. Refused requests (401, 404, 503 for a stopped app) reach no server and
are not counted.

The duration is the proxy's: from the request reaching the view to the last byte of the
answer handed to the web server (a streamed answer counts whole). Percentiles are read from
the histogram (linear within a bucket, like Prometheus' histogram_quantile), so they lie
within the bounds of the bucket that holds the true value. A Redis outage costs no request:
a failed write is dropped, and the page then shows no figures.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from django.conf import settings

from controlpanel.core.metrics.store import client

log = logging.getLogger(__name__)

SLOT_S = 10
KEEP_S = 3600 + SLOT_S
# Upper bounds (seconds) of the latency buckets; the last one is open (slower than 60 s).
LATENCY = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SHORT_S = 60
LONG_S = 300


def _key(app_id: uuid.UUID | str, slot: int) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:app-requests:{app_id}:{slot}"


def bucket_of(seconds: float) -> int:
    """The index of the first bound >= seconds; len(LATENCY) when slower than them all."""
    return bisect_left(LATENCY, seconds)


def record(
    *, app_id: uuid.UUID | str, status: int, seconds: float, now: float | None = None
) -> None:
    """Count one forwarded request (never raises: figures must not fail the request)."""
    slot = int((time.time() if now is None else now) // SLOT_S)
    name = _key(app_id, slot)
    try:
        pipe = client(settings.REDIS_URL).pipeline(transaction=False)
        pipe.hincrby(name, "n", 1)
        if status >= 500:
            pipe.hincrby(name, "err", 1)
        pipe.hincrby(name, f"b{bucket_of(seconds)}", 1)
        pipe.expireat(name, (slot + 1) * SLOT_S + KEEP_S)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("app request not counted (Redis: %s)", exc)


def quantile(q: float, counts: Sequence[int]) -> float | None:
    """The q-quantile (0..1) of a histogram with LATENCY's buckets (plain counts, the open
    bucket last), interpolated linearly within its bucket; None without observations. A
    quantile in the open bucket is its lower bound (LATENCY[-1])."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index == len(LATENCY):
                return LATENCY[-1]
            lower = LATENCY[index - 1] if index else 0.0
            upper = LATENCY[index]
            return lower + (upper - lower) * max(0.0, rank - seen) / count
        seen += count
    return LATENCY[-1]


@dataclass(frozen=True)
class Figures:
    """One app's requests over the last minute and the last five."""

    requests_1m: int
    requests_5m: int
    errors_5m: int
    rps_1m: float
    rps_5m: float
    p50_s: float | None
    p95_s: float | None

    @property
    def p50_text(self) -> str:
        return duration_text(self.p50_s)

    @property
    def p95_text(self) -> str:
        return duration_text(self.p95_s)


def figures(*, app_id: uuid.UUID | str, now: float | None = None) -> Figures | None:
    """The figures now, from the slots of the last five minutes (the current one partly
    elapsed: a rate divides by the seconds the read slots cover); None when Redis fails."""
    now = time.time() if now is None else now
    current = int(now // SLOT_S)
    slots = LONG_S // SLOT_S
    try:
        pipe = client(settings.REDIS_URL).pipeline(transaction=False)
        for slot in range(current - slots + 1, current + 1):
            pipe.hgetall(_key(app_id, slot))
        rows = pipe.execute()
    except redis.RedisError as exc:
        log.warning("app figures not read (Redis: %s)", exc)
        return None
    into_current = now - current * SLOT_S
    short_slots = SHORT_S // SLOT_S
    requests_1m = requests_5m = errors = 0
    counts = [0] * (len(LATENCY) + 1)
    for age, row in enumerate(reversed(rows)):  # age 0: the current slot
        n = int(row.get(b"n", 0))
        requests_5m += n
        if age < short_slots:
            requests_1m += n
        errors += int(row.get(b"err", 0))
        for index in range(len(counts)):
            counts[index] += int(row.get(f"b{index}".encode(), 0))
    short_covered = (short_slots - 1) * SLOT_S + into_current
    long_covered = (slots - 1) * SLOT_S + into_current
    return Figures(
        requests_1m=requests_1m,
        requests_5m=requests_5m,
        errors_5m=errors,
        rps_1m=requests_1m / short_covered,
        rps_5m=requests_5m / long_covered,
        p50_s=quantile(0.5, counts),
        p95_s=quantile(0.95, counts),
    )


def duration_text(seconds: float | None) -> str:
    """120 ms, 8.5 ms, 2.40 s; an em dash without a value."""
    if seconds is None or math.isnan(seconds):
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 0.01:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds * 1000:.1f} ms"
