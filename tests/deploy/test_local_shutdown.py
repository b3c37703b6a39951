"""Stopping every local run at once (`make run`'s Ctrl-C): each live run is stopped as a user's
stop would, its process group included, and what ignores SIGTERM is killed."""

from __future__ import annotations

import time
from pathlib import Path

from deploy.local import LocalBackend
from deploy.local.shutdown import live_runs, stop_runs
from deploy.local.state import is_alive, read_state
from deploy.types import Phase
from tests.deploy.test_local_backend import finished, py_job, running

GRANDCHILD = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "print('ready', flush=True)\n"
    "time.sleep(300)"
)
DEAF = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(300)"


def _members(pgid: int) -> list[str]:
    """The live (not zombie) processes of a process group, as `pid state`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(f"{stat.parent.name} {fields[0]}")
    return found


def _group_alive(pgid: int) -> bool:
    return bool(_members(pgid))


def _group_gone(pgid: int, within_s: float = 5.0) -> bool:
    """Whether the group has died by `within_s`: SIGKILL is delivered when the kernel next
    runs the process, a moment after the kill returns on a loaded machine."""
    deadline = time.monotonic() + within_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _group_alive(pgid)


def test_stop_runs_ends_every_run_and_its_process_group(tmp_path: Path) -> None:
    local = LocalBackend(base_dir=tmp_path / "local", grace_s=1.0, gpus=list, any_command=True)
    jobs = [py_job(GRANDCHILD, id="parent"), py_job(DEAF, id="deaf")]
    for job in jobs:
        local.apply_job(job=job)
        running(local, job.ref)
    runs = dict(live_runs(tmp_path / "local"))
    assert len(runs) == 2
    groups = [state["child_pid"] for state in runs.values()]
    assert all(_group_alive(pgid) for pgid in groups)

    stopped = stop_runs(tmp_path / "local", wait_s=20)

    assert sorted(stopped) == sorted(run.name for run in runs)
    assert list(live_runs(tmp_path / "local")) == []
    for job in jobs:
        assert finished(local, job.ref).phase is Phase.STOPPED
    # the job's own children (its process group) and the one deaf to SIGTERM are gone too
    assert not any(_group_alive(pgid) for pgid in groups)
    for run in runs:
        state = read_state(run) or {}
        assert not is_alive(state.get("supervisor_pid"), state.get("supervisor_started"))


def test_a_supervisor_that_outlives_the_wait_is_killed(tmp_path: Path) -> None:
    # grace 60 s: the supervisor waits for its child longer than stop_runs waits for it
    local = LocalBackend(base_dir=tmp_path / "local", grace_s=60.0, gpus=list, any_command=True)
    job = py_job(DEAF, id="slow")
    local.apply_job(job=job)
    running(local, job.ref)
    [(run, state)] = list(live_runs(tmp_path / "local"))
    assert stop_runs(tmp_path / "local", wait_s=1) == [run.name]
    assert _group_gone(state["child_pid"])
    assert list(live_runs(tmp_path / "local")) == []


def test_nothing_to_stop(tmp_path: Path) -> None:
    assert stop_runs(tmp_path / "nowhere", wait_s=1) == []
