"""A real events server (uvicorn serving controlpanel.asgi, as the Procfile's `events`) on the
test database and Redis, and a reader of its Server-Sent Events."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import transaction

from controlpanel.engine import logs
from controlpanel.engine.models import Workload
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.fixtures.faults import free_port
from tests.fixtures.processes import Processes


@dataclass
class Event:
    name: str
    data: dict[str, Any]
    id: str | None


@dataclass
class EventsServer:
    url: str
    procs: Processes

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """A request answered without a stream (a refusal); a stream is closed at once."""
        with httpx.stream("GET", self.url + path, timeout=10, **kwargs) as response:
            if response.status_code != 200:
                response.read()
            return response


def start_events(
    processes: Callable[[dict[str, str]], Processes], port: int | None = None, **env: str
) -> EventsServer:
    port = port or free_port()
    base = {
        "SECRET_KEY": settings.SECRET_KEY,
        "STREAMS_HEARTBEAT_SECONDS": "1",
        "STREAMS_ALLOWED_ORIGINS": "http://127.0.0.1:1",
    }
    procs = processes(base | env)
    procs.start(
        "events",
        sys.executable,
        "-m",
        "uvicorn",
        "controlpanel.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or procs.procs["events"].poll() is not None:
                raise AssertionError("the events server did not start\n" + procs.logs()) from None
            time.sleep(0.1)
    return EventsServer(url=f"http://127.0.0.1:{port}", procs=procs)


@pytest.fixture
def events_server(processes: Callable[[dict[str, str]], Processes]) -> EventsServer:
    return start_events(processes)


class Reader:
    """One open stream: `next()` is its next event (heartbeats skipped), waiting at most
    `timeout` seconds."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.iter_lines()
        self.closed = False

    def next(self, within: float = 30) -> Event:
        """The next event; an error if none comes `within` seconds (heartbeats do not count:
        a stream that only keeps alive fails the test instead of hanging it)."""
        name, data, event_id = "message", "", None
        deadline = time.monotonic() + within
        for line in self.lines:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no event within {within} s")
            if line == "":
                if data:
                    return Event(name, json.loads(data), event_id)
                name, event_id = "message", None
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data += value
            elif field == "id":
                event_id = value
        self.closed = True
        raise EOFError("the stream ended")

    def until(self, name: str) -> list[Event]:
        """The events up to and including the first `name` one."""
        seen = []
        while True:
            event = self.next()
            seen.append(event)
            if event.name == name:
                return seen


@pytest.fixture
def open_stream() -> Iterator[Callable[..., Reader]]:
    opened: list[Any] = []

    def open_(url: str, *, headers: dict[str, str] | None = None, timeout: float = 20) -> Reader:
        client = httpx.Client(timeout=httpx.Timeout(timeout))
        context = client.stream("GET", url, headers=headers or {})
        response = context.__enter__()
        opened.append((client, context))
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return Reader(response)

    yield open_
    for client, context in opened:
        context.__exit__(None, None, None)
        client.close()


def session_cookie(client: Any) -> dict[str, str]:
    """The Cookie header of a logged-in django.test.Client."""
    name = settings.SESSION_COOKIE_NAME
    return {"Cookie": f"{name}={client.cookies[name].value}"}


def running_job(project: Project, owner: Any, **fields: Any) -> Job:
    defaults = {"name": "job", "image": "x/y:1", "flavor": Flavor.objects.get(name="ai1-1-cpu")}
    state = {"state": JobState.RUNNING, "launched_run": 1}
    return Job.objects.create(project=project, owner=owner, **(defaults | state | fields))


def store(job: Workload, *texts: str) -> None:
    """Store lines as the collector does: in one transaction with the row locked (the publish
    point is inside it, the message leaves once it commits)."""
    with transaction.atomic():
        locked = Workload.objects.select_for_update(of=("self",)).get(pk=job.pk)
        logs._store(locked, list(texts))
        locked.save(update_fields=["log_lines", "progress", "curve_points", "updated_at"])
