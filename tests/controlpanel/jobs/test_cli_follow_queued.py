"""`ajuste job logs --follow` on a queued job (issue 32): while it waits, the CLI says its state,
its place in the queue (the API's `queue_position`) and why, on stderr, again each time that
changes, instead of printing nothing for minutes; once it runs, the log streams on stdout.
Against a live panel: the job's state is changed beside the CLI, each change only after the CLI
has read the job again."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.signals import request_started
from django.db import connection
from django.utils import timezone

from controlpanel.cli import waiting
from controlpanel.engine import logs
from controlpanel.engine.lifecycle import record_state
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from tests.controlpanel.streams.conftest import store
from tests.fixtures.cli import cli_as
from tests.fixtures.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
QUOTA = "CPU quota 1 vCPU, 1 in use by job first (1); this job needs 1"


@pytest.fixture
def reads_of() -> Iterator[Callable[[Job], int]]:
    """`reads_of(job)`: how many requests the live server has begun for the job's API row."""
    seen: list[str] = []

    def count(sender: Any, environ: dict[str, Any], **kwargs: Any) -> None:
        seen.append(environ.get("PATH_INFO", ""))

    request_started.connect(count)
    yield lambda job: seen.count(f"/api/v1/jobs/{job.pk}/")
    request_started.disconnect(count)


def queued(project: Any, owner: Any, name: str, minutes_ago: int, reason: str) -> Job:
    return Job.objects.create(
        project=project,
        owner=owner,
        name=name,
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        queued_at=timezone.now() - timedelta(minutes=minutes_ago),
        state_reason=reason,
    )


def test_follow_says_the_state_and_place_while_queued_then_streams_the_log(
    live_server: Any,
    project: Any,
    owner: Any,
    reads_of: Callable[[Job], int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(waiting, "WAIT_PERIOD_S", 0.1)
    ahead = queued(project, owner, "first", 10, "")
    job = queued(project, owner, "second", 5, f"{QUOTA}; position 2 in the queue")
    errors: list[BaseException] = []

    def seen_again() -> None:  # the CLI has read the job twice since the last change
        reads = reads_of(job)
        wait_for(lambda: reads_of(job) >= reads + 2, 30, "the CLI to read the job again")

    def driver() -> None:
        try:
            seen_again()
            ahead.delete()  # the job moves up
            Job.objects.filter(pk=job.pk).update(state_reason=f"{QUOTA}; position 1 in the queue")
            seen_again()
            record_state(job, JobState.PENDING, "0/1 nodes are available: 1 Insufficient cpu")
            seen_again()
            Job.objects.filter(pk=job.pk).update(launched_run=1)
            job.refresh_from_db()
            record_state(job, JobState.RUNNING, "")
            store(job, "step 1", "step 2")
            record_state(job, JobState.DONE, "exit code 0")
            logs.archive_logs(job_id=job.pk, max_rounds=0)
        except BaseException as error:  # end the job, so the CLI returns and the test fails
            errors.append(error)
            record_state(job, JobState.FAILED, "the test's driver failed")
            logs.archive_logs(job_id=job.pk, max_rounds=0)
        finally:
            connection.close()

    thread = threading.Thread(target=driver, daemon=True)
    thread.start()
    result = cli_as(owner, live_server.url)("job", "logs", "--follow", str(job.pk))
    thread.join(timeout=60)
    assert not errors, errors
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stdout.splitlines()[:2] == ["step 1", "step 2"]
    assert result.stderr.splitlines() == [
        f"Queued (position 2 in the queue): {QUOTA}; waiting for it to start…",
        f"Queued (position 1 in the queue): {QUOTA}; waiting for it to start…",
        "Pending: 0/1 nodes are available: 1 Insufficient cpu; waiting for it to start…",
        f"job {str(job.pk)[:8]} run 1 ended: DONE: exit code 0",
    ]


def test_a_queued_job_stopped_before_it_starts_ends_the_follow(
    live_server: Any,
    project: Any,
    owner: Any,
    reads_of: Callable[[Job], int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(waiting, "WAIT_PERIOD_S", 0.1)
    job = queued(project, owner, "only", 1, "")

    def driver() -> None:
        try:
            wait_for(lambda: reads_of(job) >= 2, 30, "the CLI to read the job")
        finally:  # stopped either way, so the CLI returns
            record_state(job, JobState.INTERRUPTED, "stopped by owner")
            logs.archive_logs(job_id=job.pk, max_rounds=0)
            connection.close()

    thread = threading.Thread(target=driver, daemon=True)
    thread.start()
    result = cli_as(owner, live_server.url)("job", "logs", "-f", str(job.pk))
    thread.join(timeout=60)
    assert result.stderr.splitlines() == [
        "Queued (position 1 in the queue); waiting for it to start…",
        f"job {str(job.pk)[:8]} run 1 ended: INTERRUPTED: stopped by owner",
    ]
    assert result.exit_code == 3


def test_the_waiting_line_of_kueues_place_and_of_a_started_run() -> None:
    place = {
        "local": 3,
        "cluster": 5,
        "said": "3rd in the queue for team-a, 5th in its ClusterQueue",
    }
    kueue = {"state": "QUEUED", "state_reason": "Waiting for quota", "queue_position": place}
    assert waiting.waiting_line(kueue) == (
        "Queued (3rd in the queue for team-a, 5th in its ClusterQueue): Waiting for quota; "
        "waiting for it to start…"
    )
    starting = {"state": "STARTING", "state_reason": "", "queue_position": place | {"local": 1}}
    assert waiting.waiting_line(starting) is not None  # a notebook start waits in the queue too
    assert waiting.waiting_line({"state": "STARTING", "queue_position": None}) is None
    assert (
        waiting.waiting_line({"state": "RUNNING", "state_reason": "", "queue_position": None})
        is None
    )
