"""Controlling local runs: the per-run lock, launching and signalling the supervisor,
reading the state back as an `ObservedWorkload`, and reading the log with a cursor."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from deploy import kinds
from deploy.local.paths import as_workload, workspace_dir
from deploy.local.plan import PROJECT_ROOT, base_env
from deploy.local.state import (
    State,
    is_alive,
    now_iso,
    parse_iso,
    write_json,
)
from deploy.types import (
    LogChunk,
    ObservedWorkload,
    Phase,
    ReplicaRun,
    WorkloadKind,
    WorkloadRef,
)

# A supervisor that has not announced itself this long after launch is taken for lost.
LAUNCH_GRACE = timedelta(seconds=60)
MAX_READ = 1024 * 1024


@contextmanager
def locked(run: Path) -> Iterator[None]:
    """Serialize the panel's decisions about one run (two tasks never launch it twice)."""
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(run / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def launch(run: Path, plan: dict[str, Any], *, python: str, extra: dict[str, Any]) -> None:
    """Write the plan and a fresh state, then start the detached supervisor."""
    write_json(run / "plan.json", plan, private=True)
    (run / "stop").unlink(missing_ok=True)
    log = run / "output.log"
    state = {
        "phase": Phase.INITIALIZING.value,
        "reason": "starting",
        "ref": plan["ref"],
        "run_uid": uuid.uuid4().hex,
        "created_at": now_iso(),
        "gpus": plan["gpus"],
        "log_offset": log.stat().st_size if log.exists() else 0,
        "push_attempt": 0,
        **extra,
    }
    write_json(run / "state.json", state)
    spawn(run, python=python)


def spawn(run: Path, *, python: str, push_only: bool = False) -> None:
    """Start `deploy.local.supervisor`; returns as soon as it has detached itself."""
    argv = [python, "-m", "deploy.local.supervisor", str(run)]
    if push_only:
        argv.append("--push-only")
    subprocess.run(
        argv,
        cwd=PROJECT_ROOT,
        env=base_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        timeout=30,
    )


def supervisor_alive(state: State) -> bool:
    return is_alive(state.get("supervisor_pid"), state.get("supervisor_started"))


def request_stop(run: Path, state: State) -> None:
    """The `stop` file survives a missed signal; SIGTERM makes it immediate."""
    (run / "stop").write_text(now_iso())
    if supervisor_alive(state):
        with suppress(ProcessLookupError):
            os.kill(state["supervisor_pid"], signal.SIGTERM)


def kill(state: State) -> None:
    """End a run's processes at once (before its directory is deleted)."""
    if not supervisor_alive(state):
        return
    with suppress(ProcessLookupError, PermissionError):
        os.kill(state["supervisor_pid"], signal.SIGKILL)
    for child in dict.fromkeys([state.get("child_pid"), *(state.get("child_pids") or [])]):
        if child:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(child, signal.SIGKILL)


def ref_from_state(state: State) -> WorkloadRef:
    ref = state["ref"]
    return WorkloadRef(
        kind=WorkloadKind(ref["kind"]),
        project=ref["project"],
        namespace=ref["namespace"],
        id=ref["id"],
        run=int(ref["run"]),
    )


def observation(ref: WorkloadRef, state: State | None) -> ObservedWorkload:
    """The state file as the panel sees it; a vanished supervisor is an ERROR."""
    if state is None:
        return _observed(ref, {}, Phase.GONE, "no run exists")
    phase = Phase(state["phase"])
    reason = str(state.get("reason") or "")
    if not phase.is_final and not state.get("waiting") and not supervisor_alive(state):
        phase, reason = _lost(state, phase, reason)
    if kinds.spec(ref.kind).server:  # a server ends only when stopped
        phase, reason = _as_notebook(phase, reason)
    return _observed(ref, state, phase, reason)


def _lost(state: State, phase: Phase, reason: str) -> tuple[Phase, str]:
    launched = parse_iso(state.get("updated_at") or state.get("created_at"))
    fresh = launched is not None and datetime.now(UTC) - launched < LAUNCH_GRACE
    if state.get("supervisor_pid") is None and fresh:
        return phase, reason
    pid = state.get("supervisor_pid")
    return Phase.ERROR, f"the local supervisor (pid {pid}) is gone; the run was interrupted"


def _as_notebook(phase: Phase, reason: str) -> tuple[Phase, str]:
    """Notebook words: a push while stopping is STOPPING; a failed push still leaves a
    stopped notebook (the workspace keeps the data)."""
    if phase is Phase.FINALIZING:
        return Phase.STOPPING, reason
    if phase is Phase.SYNC_FAILED:
        return Phase.STOPPED, f"stopped; {reason}"
    return phase, reason


def _observed(ref: WorkloadRef, state: State, phase: Phase, reason: str) -> ObservedWorkload:
    return ObservedWorkload(
        kind=ref.kind,
        id=ref.id,
        phase=phase,
        reason=reason,
        project=ref.project,
        namespace=ref.namespace,
        run=ref.run,
        run_uid=state.get("run_uid"),
        started_at=parse_iso(state.get("started_at")),
        finished_at=parse_iso(state.get("finished_at")),
        exit_code=state.get("exit_code"),
        timed_out=bool(state.get("timed_out")),
        push_attempt=int(state.get("push_attempt") or 0),
        node=os.uname().nodename if state.get("started_at") else None,
        url=state.get("url") if phase is Phase.RUNNING else None,
        push_note=str(state.get("push_note") or ""),
        # What the editor last did, as its supervisor last read it (every few seconds).
        last_activity=parse_iso(state.get("last_activity")) if phase is Phase.RUNNING else None,
        replicas=_replicas(ref, phase),
        replica_runs=_replica_runs(ref, state),
        # When this run was launched (or decided): the sweep's orphan grace counts from it.
        created_at=parse_iso(state.get("created_at")),
    )


def _replicas(ref: WorkloadRef, phase: Phase) -> tuple[int, int] | None:
    """A local app is one process: ready once its server answers."""
    if not kinds.spec(ref.kind).replica_per_start:
        return None
    if phase is Phase.RUNNING:
        return (1, 1)
    return (0, 1) if phase in (Phase.INITIALIZING, Phase.PENDING) else (0, 0)


def _replica_runs(ref: WorkloadRef, state: State) -> tuple[ReplicaRun, ...] | None:
    """A local app's one replica: each start of its server is a run (its own run id). A job
    of several nodes: each node is a run (`group`), billed as the JobSet's pods are."""
    if kinds.spec(ref.kind).numbered_runs and state.get("node_runs"):
        return tuple(
            ReplicaRun(
                uid=str(node["uid"]),
                started_at=started,
                finished_at=parse_iso(node.get("finished_at")),
                exit_code=node.get("exit_code"),
                node=os.uname().nodename,
            )
            for node in state["node_runs"]
            if (started := parse_iso(node.get("started_at"))) is not None
        )
    if not kinds.spec(ref.kind).replica_per_start:
        return None
    started = parse_iso(state.get("started_at"))
    if started is None or not state.get("run_uid"):
        return ()
    run = ReplicaRun(
        uid=str(state["run_uid"]),
        started_at=started,
        finished_at=parse_iso(state.get("finished_at")),
        exit_code=state.get("exit_code"),
        node=os.uname().nodename,
    )
    return (run,)


def read_log(run: Path, state: State | None, cursor: str | None, limit: int) -> LogChunk:
    """Lines of `output.log` after `cursor` (`<run uid>:<byte offset>`): complete lines while
    the process runs; once it has ended, a last line without its newline too."""
    if state is None:
        return LogChunk(lines=(), cursor=cursor or "", eof=True)
    run_uid = str(state.get("run_uid") or "")
    offset = int(state.get("log_offset") or 0)
    if cursor:
        uid, _, position = cursor.partition(":")
        if uid == run_uid and position.isdigit():
            offset = int(position)
    path = run / "output.log"
    size = path.stat().st_size if path.exists() else 0
    # The state was read before the size: an ended process wrote its last byte before that.
    ended = Phase(state["phase"]).is_final or Phase(state["phase"]) is Phase.FINALIZING
    lines: list[str] = []
    if size > offset:
        lines, offset = _lines_from(path, offset, limit, size=size, ended=ended)
    workspace = workspace_dir(run)
    return LogChunk(
        lines=tuple(as_workload(line, workspace) for line in lines),
        cursor=f"{run_uid}:{offset}",
        eof=ended and offset >= size,
    )


def _lines_from(
    path: Path, offset: int, limit: int, *, size: int, ended: bool
) -> tuple[list[str], int]:
    """Lines end at b"\\n" only: a progress bar's b"\\r" stays inside its line."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read(min(MAX_READ, size - offset))
    lines: list[str] = []
    consumed = 0
    while len(lines) < limit:
        end = data.find(b"\n", consumed)
        if end < 0:
            break
        lines.append(_decode(data[consumed:end]))
        consumed = end + 1
    rest = len(data) - consumed
    at_end = offset + len(data) >= size
    # A line still being written is returned next time, whole, except:
    last = ended and at_end  # the last line of an ended process never gets its newline
    too_long = consumed == 0 and not at_end  # a line longer than a whole read is cut
    if rest and len(lines) < limit and (last or too_long):
        lines.append(_decode(data[consumed:]))
        consumed = len(data)
    return lines, offset + consumed


def _decode(raw: bytes) -> str:
    return raw.removesuffix(b"\r").decode(errors="replace")
