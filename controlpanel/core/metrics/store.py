"""Where every process writes its measurements: Redis, read back by /metrics.

The panel runs as several processes, often on several pods: gunicorn workers (two per pod by
default), Celery workers, beat and the watcher. Numbers kept in one process's memory would answer
differently depending on which process a scrape reaches, and a worker's would never be seen.
So every observation is written at once to a few Redis hashes under `<REDIS_KEY_PREFIX>:metrics:`
(one pipelined round trip: HINCRBY of the histogram bucket, HINCRBYFLOAT of its sum), and any
web process answers /metrics with the same totals. Counters live as long as Redis keeps them; a
flushed Redis is a counter reset, which Prometheus' rate() handles.

Histograms are stored with plain (not cumulative) bucket counts, field `<labels>|<index>` with
index len(buckets) for +Inf, and `<labels>|sum`; `read_histogram` makes them cumulative.
A Redis outage costs no request: a failed write is dropped and writes pause for a few seconds.
"""

from __future__ import annotations

import functools
import logging
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.client import Pipeline
from redis.retry import Retry

log = logging.getLogger(__name__)

HTTP = "http"
TASKS = "tasks"
TASK_FAILURES = "task-failures"
SWEEP = "sweep"
COLLECTOR = "log-collector"
APP_REQUESTS = "app-requests"
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
TASK_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SEP = "|"
TIMEOUT_S = 0.5
PAUSE_AFTER_ERROR_S = 5.0
COLLECTOR_NOTE_EVERY_S = 1.0  # the log collector's rounds are 4 a second: one write a second

_paused_until = 0.0
_collector_noted_at = 0.0


@functools.lru_cache(maxsize=4)
def client(url: str) -> redis.Redis:
    """One client (and connection pool) per URL and process; short timeouts, no retries."""
    return redis.Redis.from_url(
        url,
        socket_timeout=TIMEOUT_S,
        socket_connect_timeout=TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )


def key(name: str) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:metrics:{name}"


def _label(value: str) -> str:
    return value.replace(SEP, "_")


def _write(commands: Callable[[Pipeline], object]) -> None:
    """Queue `commands` on a pipeline and send them in one round trip; never raises (metrics
    must not fail the request or task that is measured)."""
    global _paused_until
    if time.monotonic() < _paused_until:
        return
    try:
        pipe = client(settings.REDIS_URL).pipeline(transaction=False)
        commands(pipe)
        pipe.execute()
    except redis.RedisError as exc:
        _paused_until = time.monotonic() + PAUSE_AFTER_ERROR_S
        log.warning("metrics not recorded (Redis: %s); paused %ss", exc, PAUSE_AFTER_ERROR_S)


def _observe(name: str, labels: Sequence[str], seconds: float, buckets: Sequence[float]) -> None:
    fields = SEP.join(_label(value) for value in labels)
    index = bisect_left(buckets, seconds)  # the first bound >= seconds (`le`); len = +Inf
    _write(
        lambda pipe: (
            pipe.hincrby(key(name), f"{fields}{SEP}{index}", 1),
            pipe.hincrbyfloat(key(name), f"{fields}{SEP}sum", seconds),
        )
    )


def observe_request(*, route: str, method: str, status: str, seconds: float) -> None:
    _observe(HTTP, (route, method, status), seconds, HTTP_BUCKETS)


def observe_task(*, task: str, seconds: float) -> None:
    _observe(TASKS, (task,), seconds, TASK_BUCKETS)


def count_app_request(*, namespace: str, app: str) -> None:
    """A request the user-content gateway lets through to an app (what its autoscaler reads)."""
    _write(
        lambda pipe: pipe.hincrby(key(APP_REQUESTS), f"{_label(namespace)}{SEP}{_label(app)}", 1)
    )


def count_task_failure(*, task: str) -> None:
    _write(lambda pipe: pipe.hincrby(key(TASK_FAILURES), _label(task), 1))


def note_sweep(*, seconds: float) -> None:
    """A sweep finished (the beat's `jobs_sweep`, on some worker)."""
    _note_run(SWEEP, seconds)


def note_collector_round(*, seconds: float) -> None:
    """The log collector finished a round of reads (at most one write a second)."""
    global _collector_noted_at
    now = time.monotonic()
    if now - _collector_noted_at < COLLECTOR_NOTE_EVERY_S:
        return
    _collector_noted_at = now
    _note_run(COLLECTOR, seconds)


def _note_run(name: str, seconds: float) -> None:
    finished_at = time.time()
    _write(
        lambda pipe: pipe.hset(key(name), mapping={"duration": seconds, "finished_at": finished_at})
    )


@dataclass
class Series:
    """One label set of a histogram: per-bucket counts (not cumulative), +Inf last, and sum."""

    counts: list[int]
    total: float = 0.0
    labels: tuple[str, ...] = field(default=())

    def cumulative(self, buckets: Sequence[float]) -> list[tuple[str, float]]:
        running, out = 0, []
        for bound, count in zip([*map(str, buckets), "+Inf"], self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


def read_histogram(raw: dict[bytes, bytes], buckets: Sequence[float]) -> list[Series]:
    """The series stored in one histogram hash (HGETALL's answer)."""
    series: dict[tuple[str, ...], Series] = defaultdict(lambda: Series([0] * (len(buckets) + 1)))
    for name, value in raw.items():
        *labels, part = name.decode().split(SEP)
        one = series[tuple(labels)]
        one.labels = tuple(labels)
        if part == "sum":
            one.total = float(value)
        elif part.isdigit() and int(part) <= len(buckets):
            one.counts[int(part)] = int(value)
    return [series[labels] for labels in sorted(series)]
