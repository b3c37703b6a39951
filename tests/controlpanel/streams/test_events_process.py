"""The events process as k8s/events.yaml runs it: its probes are answered (Django's ASGI
handler, no Host header needed), and with one read thread (STREAMS_READ_THREADS, the most
database connections it opens at once) several streams still get every line, the reads
taking turns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from controlpanel.engine.collector import _followed
from tests.controlpanel.streams.conftest import (
    Reader,
    running_job,
    session_cookie,
    start_events,
    store,
)
from tests.fixtures.panel import logged_in
from tests.fixtures.processes import Processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_probes_are_answered_and_one_read_thread_serves_many_streams(
    processes: Callable[[dict[str, str]], Processes],
    open_stream: Callable[..., Reader],
    project: Any,
    owner: Any,
) -> None:
    server = start_events(processes, STREAMS_READ_THREADS="1")
    # As the kubelet asks: the pod's address, which ALLOWED_HOSTS does not name.
    for path in ("/healthz", "/readyz"):
        answer = httpx.get(server.url + path, headers={"Host": "10.1.2.3:8001"}, timeout=10)
        assert answer.status_code == 200, (path, answer.text)
    assert httpx.get(server.url + "/readyz", timeout=10).json()["status"] == "ok"
    cookie = session_cookie(logged_in(owner))
    jobs = [running_job(project, owner, name=f"job-{i}") for i in range(4)]
    for job in jobs:
        store(job, f"{job.name} first")
    readers = [
        open_stream(server.url + f"/p/alpha/jobs/{job.pk}/events/", headers=cookie) for job in jobs
    ]
    for job, reader in zip(jobs, readers, strict=True):
        assert _next_line(reader) == (1, f"{job.name} first")
    ids = {str(job.pk) for job in jobs}
    wait_for(lambda: _followed(ids) == ids, 10, "the logs to be marked followed")
    for job in jobs:
        store(job, f"{job.name} second")
    for job, reader in zip(jobs, readers, strict=True):
        assert _next_line(reader) == (2, f"{job.name} second")


def _next_line(reader: Reader) -> tuple[int, str]:
    while True:
        event = reader.next()
        if event.name == "line":
            return event.data["n"], event.data["text"]
