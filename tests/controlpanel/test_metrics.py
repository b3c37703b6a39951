"""/metrics (#18): off without METRICS_TOKEN, the bearer token or a site admin's session only,
and figures that match what happened: a request's route in the latency histogram, workloads by
state equal to the database's counts, task runs and failures, the broker's queue, the sweep and
the log collector, from whichever process wrote them (Redis)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from celery import shared_task
from django.conf import settings
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from controlpanel.core.metrics import store
from controlpanel.engine import tasks
from controlpanel.engine.collector import LogCollector
from controlpanel.engine.models import Workload
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.notebooks.models import Notebook
from tests.fixtures.panel import logged_in
from tests.fixtures.processes import _forget_queued_tasks

TOKEN = "metrics-token-for-the-tests-0123456789"


@shared_task(name="tests.metrics.succeed")
def succeed() -> str:
    return "ok"


@shared_task(name="tests.metrics.fail")
def fail() -> None:
    raise RuntimeError("this task fails on purpose")


@pytest.fixture
def metrics_on(settings: Any, db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """METRICS_TOKEN set, and this run's metrics and queues empty (its own Redis prefix)."""
    settings.METRICS_TOKEN = TOKEN
    monkeypatch.setattr(store, "_paused_until", 0.0)
    _forget_queued_tasks()
    yield
    _forget_queued_tasks()


def scrape(client: Client | None = None, token: str = TOKEN) -> dict[tuple[str, Any], float]:
    """The samples of one scrape, keyed by (name, sorted labels)."""
    if client is None:
        response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    else:
        response = client.get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_off_for_scrapers_without_a_token(db: Any, settings: Any, owner: Any) -> None:
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics").status_code == 404
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer x").status_code == 404
    assert logged_in(owner).get("/metrics").status_code == 404  # a manager is no site admin


def test_a_site_admin_reads_it_without_a_token(
    db: Any, settings: Any, admin_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make run` sets no METRICS_TOKEN: its admin still sees what the panel measures."""
    settings.METRICS_TOKEN = ""
    monkeypatch.setattr(store, "_paused_until", 0.0)
    samples = scrape(logged_in(admin_user))
    assert samples[("ajuste_metrics_database_up", ())] == 1
    admin = logged_in(admin_user)
    assert admin.post("/metrics").status_code == 405
    # a bearer is Prometheus's way in, and it is off: an admin's session does not open it
    assert admin.get("/metrics", HTTP_AUTHORIZATION="Bearer x").status_code == 404


def test_refuses_anonymous_a_wrong_token_and_non_admins(metrics_on: None, owner: Any) -> None:
    anonymous = Client().get("/metrics")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"ajuste_" not in anonymous.content
    for header in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer ", f"Basic {TOKEN}"):
        response = Client().get("/metrics", HTTP_AUTHORIZATION=header)
        assert response.status_code == 401, header
        assert b"ajuste_" not in response.content
    # a project's manager is no site admin
    assert logged_in(owner).get("/metrics").status_code == 401
    # a session does not make a wrong token right
    response = logged_in(owner).get("/metrics", HTTP_AUTHORIZATION="Bearer wrong")
    assert response.status_code == 401
    assert Client().post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405


def test_the_token_or_an_admin_session_reads_it(metrics_on: None, admin_user: Any) -> None:
    assert scrape()[("ajuste_metrics_store_up", ())] == 1
    assert scrape(logged_in(admin_user))[("ajuste_metrics_database_up", ())] == 1


def test_prometheus_scrapes_a_pod_at_its_ip_over_plain_http(
    metrics_on: None, settings: Any
) -> None:
    # As Prometheus asks a pod: its IP as Host, plain http, production's HTTPS redirect on.
    settings.ALLOWED_HOSTS, settings.SECURE_SSL_REDIRECT = ["ajuste.example.com"], True
    pod = "10.1.2.3:8000"
    right = Client().get("/metrics", HTTP_HOST=pod, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert right.status_code == 200
    wrong = Client().get("/metrics", HTTP_HOST=pod, HTTP_AUTHORIZATION="Bearer wrong")
    assert wrong.status_code == 401
    assert Client().get("/metrics", HTTP_HOST="10.1.2.3:8000").status_code == 400


def test_a_request_lands_in_the_histogram_by_route_name(metrics_on: None, owner: Any) -> None:
    client = logged_in(owner)
    assert client.get("/p/alpha/jobs/").status_code == 200
    assert client.get("/p/alpha/jobs/").status_code == 200
    assert client.get("/p/alpha/jobs/no-such-job/").status_code == 404
    assert Client().get("/no/such/page/at-all").status_code in (302, 404)
    samples = scrape()
    labels = (("method", "GET"), ("route", "job-list"), ("status", "2xx"))
    assert samples[("ajuste_http_request_duration_seconds_count", labels)] == 2
    assert samples[("ajuste_http_request_duration_seconds_bucket", (("le", "+Inf"), *labels))] == 2
    assert samples[("ajuste_http_request_duration_seconds_sum", labels)] > 0
    missing = (("method", "GET"), ("route", "job-detail"), ("status", "4xx"))
    assert samples[("ajuste_http_request_duration_seconds_count", missing)] == 1
    routes = {
        dict(labels)["route"]
        for (name, labels) in samples
        if name == "ajuste_http_request_duration_seconds_count"
    }
    assert not any("/" in route for route in routes), routes  # names, never paths


def test_an_odd_method_is_one_label(metrics_on: None) -> None:
    Client().generic("BREW", "/healthz")
    Client().generic("X|Y", "/healthz")
    samples = scrape()
    odd = (("method", "other"), ("route", "healthz"), ("status", "2xx"))
    assert samples[("ajuste_http_request_duration_seconds_count", odd)] == 2


def _workload(project: Any, owner: Any, kind: type[Workload], state: str, **extra: Any) -> None:
    kind.objects.create(
        project=project,
        owner=owner,
        name=f"w-{Workload.objects.count()}",
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=state,
        **extra,
    )


def test_workloads_by_kind_and_state_equal_the_database(
    metrics_on: None, project: Any, owner: Any
) -> None:
    for state in ("QUEUED", "QUEUED", "RUNNING", "DONE", "FAILED"):
        _workload(project, owner, Job, state)
    _workload(project, owner, Notebook, "STARTING")
    _workload(project, owner, Notebook, "RUNNING")
    samples = scrape()
    database = Counter(Workload.objects.values_list("kind", "state"))
    exposed = {
        (dict(labels)["kind"], dict(labels)["state"]): value
        for (name, labels), value in samples.items()
        if name == "ajuste_workloads"
    }
    assert exposed == {key: float(count) for key, count in database.items()}
    waiting = Workload.objects.filter(state__in=("QUEUED", "STARTING"), admitted_at=None)
    assert samples[("ajuste_workloads_waiting", (("kind", "job"),))] == 2
    assert samples[("ajuste_workloads_waiting", (("kind", "notebook"),))] == 1
    assert waiting.count() == 3


def test_task_runs_and_failures_are_counted(metrics_on: None) -> None:
    succeed.apply()
    succeed.apply()
    assert fail.apply().failed()
    samples = scrape()
    ran = (("task", "tests.metrics.succeed"),)
    assert samples[("ajuste_celery_task_duration_seconds_count", ran)] == 2
    assert samples[("ajuste_celery_task_duration_seconds_count", (("task", "tests.metrics.fail"),))]
    assert samples[("ajuste_celery_task_failures_total", (("task", "tests.metrics.fail"),))] == 1
    assert ("ajuste_celery_task_failures_total", ran) not in samples


def test_queue_length_is_the_brokers(metrics_on: None) -> None:
    assert scrape()[("ajuste_celery_queue_length", (("queue", "celery"),))] == 0
    succeed.apply_async()
    succeed.apply_async()
    succeed.apply_async(queue="notifications")
    samples = scrape()
    assert samples[("ajuste_celery_queue_length", (("queue", "celery"),))] == 2
    assert samples[("ajuste_celery_queue_length", (("queue", "notifications"),))] == 1


def test_the_sweep_notes_its_duration(metrics_on: None, local_jobs: Any) -> None:
    assert ("ajuste_sweep_duration_seconds", ()) not in scrape()
    before = time.time()
    tasks.jobs_sweep.apply()
    samples = scrape()
    assert 0 < samples[("ajuste_sweep_duration_seconds", ())] < 60
    assert before <= samples[("ajuste_sweep_last_finished_timestamp_seconds", ())] <= time.time()


@pytest.mark.django_db(transaction=True)
def test_the_log_collector_notes_its_rounds(metrics_on: None, monkeypatch: Any) -> None:
    monkeypatch.setattr(store, "_collector_noted_at", 0.0)
    stop = threading.Event()
    collector = LogCollector(interval_s=0.05)
    thread = threading.Thread(target=collector.run, args=(stop,))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not store.client(settings.REDIS_URL).exists(store.key(store.COLLECTOR)):
            assert time.monotonic() < deadline, "no collector round noted"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(10)
    samples = scrape()
    assert 0 <= samples[("ajuste_log_collector_lag_seconds", ())] < 5
    assert samples[("ajuste_log_collector_round_duration_seconds", ())] >= 0


def test_requests_go_on_when_redis_is_down(metrics_on: None, settings: Any) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert Client().get("/healthz").status_code == 200
    samples = scrape()
    assert samples[("ajuste_metrics_store_up", ())] == 0
    assert samples[("ajuste_metrics_database_up", ())] == 1
