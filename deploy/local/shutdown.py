"""Stopping every local run at once: what `make run` does when it is stopped (Ctrl-C).

A run's supervisor is detached on purpose (a panel restart loses nothing), so stopping the
panel's processes leaves jobs, JupyterLab servers and app model servers running. `stop_runs`
asks each live supervisor to stop as a user's stop would (the `stop` file and SIGTERM: its
process group gets SIGTERM, then SIGKILL after the plan's grace period, then the rw volumes
are pushed), waits for them, and kills what is still there at the deadline. The next panel
start observes the runs' final states as usual.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from deploy.local import runs
from deploy.local.state import State, read_state

POLL_S = 0.2


def live_runs(base: Path) -> Iterator[tuple[Path, State]]:
    """The run directories under `base` whose supervisor still lives, with their state."""
    for path in sorted(base.glob("runs/*/*/state.json")):
        state = read_state(path.parent)
        if state is not None and runs.supervisor_alive(state):
            yield path.parent, state


def stop_runs(base: Path, *, wait_s: float = 30.0) -> list[str]:
    """Stop every live run under `base`; the names of those that were running. What has not
    ended `wait_s` seconds after the request (a push to a dead store...) is killed."""
    stopping = list(live_runs(base))
    for run, state in stopping:
        runs.request_stop(run, state)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(_alive(run) for run, _ in stopping):
        time.sleep(POLL_S)
    for run, _ in stopping:
        last = read_state(run)
        if last is not None:
            runs.kill(last)  # nothing when it ended: it checks the supervisor lives
    return [run.name for run, _ in stopping]


def _alive(run: Path) -> bool:
    state = read_state(run)
    return state is not None and runs.supervisor_alive(state)
