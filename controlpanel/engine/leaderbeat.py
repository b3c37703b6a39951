"""Beat with a leader (CELERY_BEAT_SCHEDULER): every beat replica runs this scheduler, only the
one holding the `ajuste-sweep` Lease sends the periodic tasks (engine/leader.py). A beat that
does not lead sends nothing and only touches `<schedule>.follower`, so the liveness probe
(a schedule file written within 10 minutes) keeps a waiting replica alive. A replica that
takes over sends what its schedule file says is due: each periodic task is safe to run again
(the sweep holds its own lock, the others are idempotent)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from celery.beat import PersistentScheduler

from controlpanel.engine.leader import SWEEP_LEASE, Leadership, leadership


class LeaderScheduler(PersistentScheduler):  # type: ignore[misc]
    """A PersistentScheduler whose ticks send only while its replica leads."""

    leader: Leadership | None = None

    def setup_schedule(self) -> None:
        super().setup_schedule()
        self._stop_leading = threading.Event()
        if self.leader is None:
            self.leader = leadership(SWEEP_LEASE)
        self.leader.start(self._stop_leading)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        assert self.leader is not None
        if not self.leader.leading():
            Path(f"{self.schedule_filename}.follower").touch()
            return min(float(self.max_interval), self.leader.retry_s)
        return float(super().tick(*args, **kwargs))

    def close(self) -> None:
        self._stop_leading.set()
        if self.leader is not None:
            self.leader.join()
        super().close()
