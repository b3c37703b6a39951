"""What /metrics answers, gathered at scrape time by two prometheus_client collectors.

`StoreCollector` reads what every process wrote to Redis (store.py) and the Celery queues'
lengths, in one pipelined round trip. `WorkloadCollector` counts workloads by kind and state,
and those waiting for admission, in one aggregate query. Neither keeps anything in this
process, so every web process answers the same figures. The registry has no process or
platform collectors: they would describe whichever gunicorn worker happened to answer.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, Q
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from redis import RedisError

from controlpanel.core.metrics import store

# kombu's Redis transport keeps a queue's messages of priority p > 0 in `<queue>\x06\x16<p>`.
_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


def queue_names() -> list[str]:
    """The Celery queues the workers consume (the default one and those routes name)."""
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    return sorted({settings.CELERY_TASK_DEFAULT_QUEUE} | routed)


class StoreCollector(Collector):
    """Request and task histograms, task failures, the last sweep and log collector round
    (from Redis), and the Celery queues' lengths (from the broker)."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "ajuste_metrics_store_up", "Whether Redis, where every process writes, answered."
        )
        try:
            http, tasks, failures, sweep, logs, apps = self._read_store()
            queues = self._queue_lengths()
        except RedisError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield self._histogram(
            "ajuste_http_request_duration_seconds",
            "Time to answer a request (to its headers), by route name, method and status class.",
            ["route", "method", "status"],
            http,
            store.HTTP_BUCKETS,
        )
        yield self._histogram(
            "ajuste_celery_task_duration_seconds",
            "Time a Celery task ran, failed and retried runs included, by task name.",
            ["task"],
            tasks,
            store.TASK_BUCKETS,
        )
        yield from self._celery_counts(failures, queues)
        yield from self._last_run(
            "ajuste_sweep",
            "the reconcile sweep (workloads/sweep.py)",
            sweep,
        )
        yield from self._log_collector(logs)
        yield self._app_requests(apps)

    @staticmethod
    def _celery_counts(failures: dict[bytes, bytes], queues: dict[str, int]) -> Iterator[Metric]:
        """Failed task runs by task name, and the messages waiting in each queue."""
        failed = CounterMetricFamily(
            "ajuste_celery_task_failures", "Celery task runs that raised.", labels=["task"]
        )
        for name, count in sorted(failures.items()):
            failed.add_metric([name.decode()], int(count))
        yield failed
        queued = GaugeMetricFamily(
            "ajuste_celery_queue_length", "Messages waiting in a Celery queue.", labels=["queue"]
        )
        for queue, length in queues.items():
            queued.add_metric([queue], length)
        yield queued

    @staticmethod
    def _app_requests(apps: dict[bytes, bytes]) -> Metric:
        served = CounterMetricFamily(
            "ajuste_app_requests",
            "Requests the user-content gateway let through to an app (its autoscalers' rate).",
            labels=["app_namespace", "app"],
        )
        for labels, count in sorted(apps.items()):
            served.add_metric(labels.decode().split(store.SEP, 1), int(count))
        return served

    def _read_store(self) -> list[dict[bytes, bytes]]:
        pipe = store.client(settings.REDIS_URL).pipeline(transaction=False)
        names = (store.HTTP, store.TASKS, store.TASK_FAILURES, store.SWEEP, store.COLLECTOR)
        for name in (*names, store.APP_REQUESTS):
            pipe.hgetall(store.key(name))
        return pipe.execute()

    def _queue_lengths(self) -> dict[str, int]:
        prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
        names = queue_names()
        pipe = store.client(settings.CELERY_BROKER_URL).pipeline(transaction=False)
        for queue in names:
            for suffix in _PRIORITY_SUFFIXES:
                pipe.llen(f"{prefix}{queue}{suffix}")
        lengths = pipe.execute()
        step = len(_PRIORITY_SUFFIXES)
        return {queue: sum(lengths[i * step : (i + 1) * step]) for i, queue in enumerate(names)}

    @staticmethod
    def _histogram(
        name: str,
        documentation: str,
        labels: list[str],
        raw: dict[bytes, bytes],
        buckets: tuple[float, ...],
    ) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, documentation, labels=labels)
        for series in store.read_histogram(raw, buckets):
            if len(series.labels) == len(labels):
                family.add_metric(
                    list(series.labels), series.cumulative(buckets), sum_value=series.total
                )
        return family

    @staticmethod
    def _last_run(prefix: str, what: str, raw: dict[bytes, bytes]) -> Iterator[Metric]:
        if not raw:
            return  # never ran since Redis was empty: no sample rather than a made-up one
        yield GaugeMetricFamily(
            f"{prefix}_duration_seconds",
            f"How long the last run of {what} took.",
            value=float(raw[b"duration"]),
        )
        yield GaugeMetricFamily(
            f"{prefix}_last_finished_timestamp_seconds",
            f"When the last run of {what} finished (Unix time).",
            value=float(raw[b"finished_at"]),
        )

    def _log_collector(self, raw: dict[bytes, bytes]) -> Iterator[Metric]:
        yield from self._last_run("ajuste_log_collector_round", "the log collector's round", raw)
        if raw:
            # A followed log's new lines wait at most about one round plus this.
            yield GaugeMetricFamily(
                "ajuste_log_collector_lag_seconds",
                "Seconds since the log collector last finished a round of reads "
                "(recorded once a second; grows without bound when the collector stops).",
                value=max(0.0, time.time() - float(raw[b"finished_at"])),
            )


class WorkloadCollector(Collector):
    """Workloads by kind and state, and those waiting for admission (the queue), by kind."""

    def collect(self) -> Iterator[Metric]:
        from controlpanel.engine.admission import WAITING_STATES
        from controlpanel.engine.models import Workload

        waiting_filter = Q(state__in=WAITING_STATES, admitted_at=None)
        query = (
            Workload.objects.order_by()
            .values("kind", "state")
            .annotate(count=Count("pk"), waiting=Count("pk", filter=waiting_filter))
        )
        by_state = GaugeMetricFamily(
            "ajuste_workloads", "Workloads by kind and state.", labels=["kind", "state"]
        )
        waiting = GaugeMetricFamily(
            "ajuste_workloads_waiting",
            "Workloads waiting for admission (the queue), by kind.",
            labels=["kind"],
        )
        waiting_by_kind: dict[str, int] = {}
        up = GaugeMetricFamily(
            "ajuste_metrics_database_up", "Whether the workloads could be counted."
        )
        try:
            rows = list(query)
        except DatabaseError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        for row in rows:
            by_state.add_metric([row["kind"], row["state"]], row["count"])
            waiting_by_kind[row["kind"]] = waiting_by_kind.get(row["kind"], 0) + row["waiting"]
        for kind, count in sorted(waiting_by_kind.items()):
            waiting.add_metric([kind], count)
        yield by_state
        yield waiting


@functools.cache
def registry() -> CollectorRegistry:
    """This process's registry: only collectors that read shared state at scrape time."""
    made = CollectorRegistry(auto_describe=False)
    made.register(StoreCollector())
    made.register(WorkloadCollector())
    return made
