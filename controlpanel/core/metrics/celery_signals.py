"""Celery task runs, measured in the worker that runs them and written to Redis (store.py).

Connected in every process that loads the Celery app; only workers run tasks (and tests that
run one eagerly)."""

from __future__ import annotations

import time
from typing import Any

from celery.signals import task_failure, task_postrun, task_prerun

from controlpanel.core.metrics import store

_started: dict[str, float] = {}  # task id -> when its run began (monotonic)


@task_prerun.connect
def _run_started(task_id: str | None = None, **kwargs: Any) -> None:
    if task_id:
        _started[task_id] = time.monotonic()


@task_postrun.connect
def _run_finished(task_id: str | None = None, task: Any = None, **kwargs: Any) -> None:
    started = _started.pop(task_id or "", None)
    if started is not None and task is not None:
        store.observe_task(task=task.name, seconds=time.monotonic() - started)


@task_failure.connect
def _run_failed(sender: Any = None, **kwargs: Any) -> None:
    if sender is not None:
        store.count_task_failure(task=sender.name)
