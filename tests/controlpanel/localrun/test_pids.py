"""What `make run` records under var/run/ and what the next start cleans: a recorded process
group that still runs is stopped (even one deaf to SIGTERM); a pid the system gave to another
process since is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from controlpanel.localrun import pids

DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"


def _group(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_the_next_start_stops_what_a_crash_left(tmp_path: Path) -> None:
    polite = _group("import time; time.sleep(300)")
    deaf = _group(DEAF)
    time.sleep(0.3)  # the deaf one has set its handler
    pids.record(tmp_path, "redis", polite.pid)
    pids.record(tmp_path, "proc-web", deaf.pid)
    assert pids.leftovers(tmp_path) == {"proc-web": deaf.pid, "redis": polite.pid}
    assert pids.clean_leftovers(tmp_path, wait_s=1) == ["proc-web", "redis"]
    assert polite.wait(10) < 0 and deaf.wait(10) < 0  # ended by a signal
    assert list((tmp_path / "run").glob("*.pid")) == []


def test_a_recycled_pid_is_not_ours(tmp_path: Path) -> None:
    other = _group("import time; time.sleep(300)")
    try:
        pids.record(tmp_path, "s3", other.pid)
        path = tmp_path / "run" / "s3.pid"
        pid, ticks = path.read_text().split()
        path.write_text(f"{pid} {int(ticks) - 1}\n")  # the pid, started at another time
        assert pids.leftovers(tmp_path) == {}
        assert pids.clean_leftovers(tmp_path, wait_s=1) == []
        assert other.poll() is None  # left alone
        assert not path.exists()  # and the stale file forgotten
    finally:
        other.kill()
        other.wait()


def test_running_reads_one_name(tmp_path: Path) -> None:
    assert pids.running(tmp_path, "make-run") is None
    pids.record(tmp_path, "make-run", subprocess.os.getpid())  # type: ignore[attr-defined]
    assert pids.running(tmp_path, "make-run") == os.getpid()
