"""The sweep re-sends the reconcile of an admitted job that was never launched: with a wait per
job that doubles (10 s, 20 s, 40 s ... at most 5 minutes), so a job whose task keeps failing is
not re-sent at every sweep."""

from __future__ import annotations

import itertools
import uuid

import pytest

from controlpanel.engine import tasks


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [1000.0]
    monkeypatch.setattr(tasks, "clock", lambda: clock[0])
    return clock


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch, now: list[float]) -> list[tuple[float, str]]:
    delays: list[tuple[float, str]] = []
    monkeypatch.setattr(
        tasks.job_reconcile, "delay", lambda job_id: delays.append((now[0] - 1000, job_id))
    )
    return delays


def test_re_sends_back_off_per_job(now: list[float], sent: list[tuple[float, str]]) -> None:
    stuck, other = str(uuid.uuid4()), str(uuid.uuid4())
    for _ in range(0, 1200, 5):  # a sweep every 5 s for 20 minutes
        tasks.redrive(stuck)
        now[0] += 5
    times = [at for at, job_id in sent if job_id == stuck]
    assert times == [0, 10, 30, 70, 150, 310, 610, 910]
    waits = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert waits == [10, 20, 40, 80, 160, 300, 300]
    assert tasks.redrive(other)  # another job's waits are its own
    assert sent[-1] == (now[0] - 1000, other)
