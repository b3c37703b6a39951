"""`ajuste job logs --follow` over the live stream: the logs API names the stream (Link,
rel="stream") when STREAMS_URL is set, the CLI follows it against a real uvicorn and Redis,
reopens it with Last-Event-ID when the events server restarts (nothing lost, nothing
repeated), and polls when the stream cannot be opened."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from controlpanel.engine import logs
from controlpanel.engine.collector import _followed, _followed_key
from controlpanel.engine.lifecycle import record_state
from controlpanel.jobs.states import JobState
from controlpanel.streams.limits import _key
from tests.controlpanel.streams.conftest import running_job, start_events, store
from tests.fixtures.cli import cli_as
from tests.fixtures.faults import free_port
from tests.fixtures.processes import Processes, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
TRUNCATED = f"{logs.MARK} log truncated: the archive stopped before the end of the log"


def open_streams(user: Any) -> int:
    client = redis.Redis.from_url(settings.REDIS_URL)
    return int(client.zcount(_key(user.pk), time.time(), "+inf"))


@pytest.fixture
def in_background() -> Iterator[Callable[[Callable[[], None], Any], None]]:
    """Run a driver beside the CLI; its failure ends the job (so the CLI returns rather than
    follows forever) and fails the test."""
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []

    def start(driver: Callable[[], None], job: Any) -> None:
        def run() -> None:
            try:
                driver()
            except BaseException as error:
                errors.append(error)
                record_state(job, JobState.FAILED, "the test's driver failed")
                logs.archive_logs(job_id=job.pk, max_rounds=0)
            finally:
                connection.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]


def test_follow_streams_and_resumes_across_a_restart(
    live_server: Any,
    processes: Callable[[dict[str, str]], Processes],
    settings: Any,
    in_background: Callable[[Callable[[], None], Any], None],
    project: Any,
    owner: Any,
) -> None:
    port = free_port()
    server = start_events(processes, port=port)
    settings.STREAMS_URL = server.url
    job = running_job(project, owner)
    store(job, "one")

    def driver() -> None:
        wait_for(lambda: open_streams(owner) == 1, 30, "the CLI's stream", server.procs)
        store(job, "two")
        time.sleep(0.5)
        server.procs.kill("events")  # a restarted pod; what is stored meanwhile waits
        redis.Redis.from_url(settings.REDIS_URL).delete(_key(owner.pk))
        store(job, "three")
        restarted = start_events(processes, port=port)
        wait_for(lambda: open_streams(owner) == 1, 60, "the stream reopened", restarted.procs)
        store(job, "four")
        record_state(job, JobState.DONE, "exit code 0")
        logs.archive_logs(job_id=job.pk, max_rounds=0)

    in_background(driver, job)
    result = cli_as(owner, live_server.url)("job", "logs", "--follow", str(job.pk))
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stdout.splitlines() == ["one", "two", "three", "four", TRUNCATED]
    assert result.stderr == f"job {str(job.pk)[:8]} run 1 ended: DONE: exit code 0\n"


def test_follow_polls_when_the_stream_cannot_be_opened(
    live_server: Any,
    settings: Any,
    in_background: Callable[[Callable[[], None], Any], None],
    project: Any,
    owner: Any,
) -> None:
    settings.STREAMS_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    job = running_job(project, owner)
    store(job, "one")

    def driver() -> None:
        wait_for(lambda: _followed({str(job.pk)}), 30, "the CLI to read the log")
        store(job, "two")
        cache.delete(_followed_key(job.pk))  # each poll marks it again, then reads
        wait_for(lambda: _followed({str(job.pk)}), 30, "a poll after the second line")
        record_state(job, JobState.FAILED, "exit code 1")
        logs.archive_logs(job_id=job.pk, max_rounds=0)

    in_background(driver, job)
    result = cli_as(owner, live_server.url)("job", "logs", "-f", str(job.pk))
    assert result.stdout.splitlines() == ["one", "two", TRUNCATED]
    assert result.stderr == f"job {str(job.pk)[:8]} run 1 ended: FAILED: exit code 1\n"
    assert result.exit_code == 3


def test_the_logs_name_their_stream_only_when_there_is_one(
    live_server: Any, settings: Any, project: Any, owner: Any
) -> None:
    import httpx

    from tests.controlpanel.streams.test_streams import _bearer

    job = running_job(project, owner)
    url = f"{live_server.url}/api/v1/jobs/{job.pk}/logs/"
    headers = {"Authorization": _bearer(owner)}
    assert "link" not in httpx.get(url, headers=headers).headers
    settings.STREAMS_URL = "https://panel.example"
    answer = httpx.get(url, headers=headers)
    assert answer.status_code == 200
    stream = f"https://panel.example/api/v1/jobs/{job.pk}/logs/stream/"
    assert answer.links["stream"]["url"] == stream
