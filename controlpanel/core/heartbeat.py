"""The Celery worker's liveness heartbeat: a file the worker process touches every few
seconds from its own thread, which the liveness probe checks without going through Redis.

`celery inspect ping` as a liveness probe needs the broker: during a Redis outage every worker
fails it and Kubernetes restarts them in a loop, which helps nothing. The thread starts at
`worker_init` (before the worker connects to the broker, which it may retry for as long as the
outage lasts), so the file says "this process runs", whatever Redis does."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from celery.signals import worker_init
from django.conf import settings

_started = threading.Event()


def beat_forever(path: Path, interval_s: float) -> None:
    while True:
        path.touch()
        time.sleep(interval_s)


@worker_init.connect
def start_heartbeat(**kwargs: Any) -> None:
    if not settings.WORKER_HEARTBEAT_FILE or _started.is_set():
        return
    _started.set()
    path = Path(settings.WORKER_HEARTBEAT_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    thread = threading.Thread(
        target=beat_forever,
        args=(path, settings.WORKER_HEARTBEAT_SECONDS),
        name="ajuste-heartbeat",
        daemon=True,
    )
    thread.start()
