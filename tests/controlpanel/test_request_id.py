"""A request id (#18): the ingress's X-Request-ID kept when sane, else made; answered back; on
every log line of the request; carried in the headers of the tasks it sends, so the worker's
log lines of those tasks carry it too (a real worker consuming from the real broker)."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from celery import shared_task
from celery.contrib.testing.worker import start_worker
from django.http import HttpRequest, HttpResponse
from django.test import Client

from controlpanel.celery import app
from controlpanel.core.requestid import REQUEST_ID, RequestIdMiddleware
from controlpanel.engine.tasks import job_cleanup
from tests.fixtures.processes import _forget_queued_tasks, wait_for

HEX32 = re.compile(r"[0-9a-f]{32}")
QUEUE = "request-id-tests"
log = logging.getLogger("tests.request_id")


@shared_task(name="tests.request_id.say")
def say(word: str) -> str | None:
    log.info("the task says %s", word)
    return REQUEST_ID.get()


def test_a_sane_ingress_id_is_kept_and_answered(db: Any) -> None:
    for sent in ("0f1e2d3c4b5a69788796a5b4c3d2e1f0", "req-2024.12.04:abc_DEF-1"):
        response = Client().get("/healthz", HTTP_X_REQUEST_ID=sent)
        assert response["X-Request-ID"] == sent


def test_an_id_is_made_when_none_comes(db: Any) -> None:
    first = Client().get("/healthz")["X-Request-ID"]
    second = Client().get("/login/")["X-Request-ID"]
    assert HEX32.fullmatch(first) and HEX32.fullmatch(second) and first != second


@pytest.mark.parametrize(
    "hostile",
    [
        "abcdefgh\r\nSet-Cookie: sessionid=stolen",
        "abcdefgh\nrequest_id=forged",
        "a" * 500,
        "short",
        "with spaces in it",
        "<script>alert(1)</script>",
        "ünïcödé-request-id",
    ],
)
def test_a_hostile_id_is_replaced(hostile: str) -> None:
    seen: list[str | None] = []

    def view(request: HttpRequest) -> HttpResponse:
        seen.append(REQUEST_ID.get())
        return HttpResponse("ok")

    request = HttpRequest()
    request.META["HTTP_X_REQUEST_ID"] = hostile
    response = RequestIdMiddleware(view)(request)
    assert HEX32.fullmatch(response["X-Request-ID"])
    assert seen == [response["X-Request-ID"]]
    response.close()  # as the WSGI server does once the body is sent
    assert REQUEST_ID.get() is None


def test_a_hostile_id_through_the_whole_stack(db: Any) -> None:
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="abcdefgh\nSet-Cookie: a=b")
    assert HEX32.fullmatch(response["X-Request-ID"])
    assert "a=b" not in str(response.cookies)
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="x" * 500)
    assert HEX32.fullmatch(response["X-Request-ID"])
    assert REQUEST_ID.get() is None  # the response was closed: no id outside a request


def test_the_requests_log_lines_carry_it(db: Any, caplog: pytest.LogCaptureFixture) -> None:
    # Django logs "Not Found: ..." after the middleware chain has returned.
    with caplog.at_level(logging.WARNING, logger="django.request"):
        Client().get("/api/v1/no-such-thing/", HTTP_X_REQUEST_ID="trace-0002-abcdef")
        Client().get("/api/v1/no-such-thing-either/")
    records = [r for r in caplog.records if r.name == "django.request"]
    ids = [r.request_id for r in records]  # type: ignore[attr-defined]
    assert len(ids) == 2 and ids[0] == "trace-0002-abcdef" and HEX32.fullmatch(ids[1])
    outside = logging.getLogger("tests").makeRecord("tests", logging.INFO, "f", 1, "m", (), None)
    assert outside.request_id == "-"  # type: ignore[attr-defined]


@pytest.fixture
def worker(db: Any, settings: Any) -> Iterator[Any]:
    """A real Celery worker (in a thread) consuming this run's own queue from the broker."""
    settings.AJUSTE_LOCAL_BACKEND_TRUSTED = True  # its start-up check: tests are one user
    settings.WORKER_HEARTBEAT_FILE = ""  # no liveness thread outliving this test
    _forget_queued_tasks()
    with start_worker(
        app, pool="solo", perform_ping_check=False, queues=[QUEUE], shutdown_timeout=10
    ) as started:
        yield started
    _forget_queued_tasks()


def test_a_task_sent_in_a_request_logs_with_its_id(
    worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    results: list[Any] = []

    def view(request: HttpRequest) -> HttpResponse:
        results.append(say.apply_async(("hello",), queue=QUEUE))
        return HttpResponse("sent")

    request = HttpRequest()
    request.META["HTTP_X_REQUEST_ID"] = "ingress-id-42-abcdef"
    with caplog.at_level(logging.INFO, logger="tests.request_id"):
        RequestIdMiddleware(view)(request).close()
        say.apply_async(("outside",), queue=QUEUE)  # sent by no request: no id
        deadline_lines = _wait_for_lines(caplog, 2)
    by_word = {r.args[0]: r for r in deadline_lines}  # type: ignore[index]
    assert by_word["hello"].request_id == "ingress-id-42-abcdef"  # type: ignore[attr-defined]
    assert by_word["outside"].request_id == "-"  # type: ignore[attr-defined]
    assert REQUEST_ID.get() is None


@pytest.mark.django_db(transaction=True)
def test_the_procfile_workers_lines_carry_the_requests_id(processes: Any) -> None:
    """The worker as the Procfile runs it (prefork, its own log format): the line Celery logs
    for the task's end, in the pool's child process, names the request's id."""
    procs = processes({})
    procs.start(
        "worker",
        sys.executable,
        "-m",
        "celery",
        "-A",
        "controlpanel",
        "worker",
        "--loglevel=INFO",
        "--pool=prefork",
        "--concurrency=1",
        "--without-gossip",
        "--without-mingle",
        "-Q",
        "celery",
    )

    def view(request: HttpRequest) -> HttpResponse:
        job_cleanup.delay([])
        return HttpResponse("sent")

    request = HttpRequest()
    request.META["HTTP_X_REQUEST_ID"] = "procfile-worker-0042"
    RequestIdMiddleware(view)(request).close()
    line = re.compile(
        r"ForkPoolWorker-\d+\] request_id=procfile-worker-0042 "
        r"Task controlpanel\.workloads\.tasks\.job_cleanup\[[0-9a-f-]+\] succeeded"
    )
    wait_for(lambda: line.search(procs.logs()), 60, "the task's line with the id", procs)


def _wait_for_lines(caplog: pytest.LogCaptureFixture, count: int) -> list[logging.LogRecord]:
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        lines = [r for r in caplog.records if r.name == "tests.request_id"]
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"the worker logged {caplog.records!r}")
