"""The process that carries one local run, detached from the panel (double fork, own session),
so Celery tasks never wait on a workload and a panel restart loses nothing.

    python -m deploy.local.supervisor RUN_DIR [--push-only] [--foreground]

It pulls the volumes, runs the command (never through a shell) with its output in
`output.log`, pushes the rw volumes every `push_every_s` while it runs (`PeriodicPush`), tells
when a notebook's editor answers and what it last did (`ServerWatch`: RUNNING only then),
enforces the timeout, honours a stop (SIGTERM to itself, or the `stop` file):
SIGTERM to the process group, SIGKILL after the grace period; then pushes rw volumes
(three-way, against the manifests the pull left in `<run>/sync`, outside the volumes; the
keys left alone as conflicts become `push_note`). Every step is recorded in `state.json`.
`--push-only` retries the final push after SYNC_FAILED.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deploy.local.group import NodeGroup, node_log
from deploy.local.paths import as_workload, workspace_dir
from deploy.local.state import now_iso, process_start_ticks, read_json, read_state, update_state
from deploy.types import Phase
from storage.sync.stats import conflict_note

POLL_S = 0.1


class Supervisor:
    """Executes `plan.json` of one run directory."""

    def __init__(self, run: Path) -> None:
        self.run = run
        plan = read_json(run / "plan.json")
        if plan is None:
            raise RuntimeError(f"{run} has no plan.json")
        self.plan: dict[str, Any] = plan
        self.stop_requested = False
        probe = plan.get("probe")
        self.server: ServerWatch | HealthWatch | None = None
        if probe:
            self.server = HealthWatch(probe) if "health" in probe else ServerWatch(probe)
        self.unanswered = ""  # why the editor counts as failed to start, once it does
        self.pushes = PeriodicPush(self)
        self.group: NodeGroup | None = None  # a job of several nodes (`group`)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self.stop_requested = True

    def stopping(self) -> bool:
        return self.stop_requested or (self.run / "stop").exists()

    def announce(self, **changes: Any) -> None:
        pid = os.getpid()
        update_state(
            self.run, supervisor_pid=pid, supervisor_started=process_start_ticks(pid), **changes
        )

    def run_all(self) -> None:
        """Pull, run, push."""
        pulling = bool(self.plan["pull"])
        self.announce(
            phase=Phase.INITIALIZING.value, reason="pulling volumes" if pulling else "starting"
        )
        if pulling:
            code, why = self.sync("pull", self.plan["pull"])
            if code != 0 and self.stopping():
                self.finish({"phase": Phase.STOPPED.value, "reason": "stopped before it started"})
                return
            if code != 0:
                self.finish({"phase": Phase.FAILED.value, "reason": f"volume pull failed: {why}"})
                return
        if self.stopping():
            self.finish({"phase": Phase.STOPPED.value, "reason": "stopped before it started"})
            return
        outcome = self.run_process()
        if self.plan["push"]:
            self.push(outcome)
        else:
            self.finish(outcome)

    def push_only(self) -> None:
        """The retry after SYNC_FAILED: push again, then end as the run had ended."""
        state = read_state(self.run) or {}
        self.push(state.get("outcome") or {"phase": Phase.FAILED.value, "reason": "unknown"})

    def run_process(self) -> dict[str, Any]:
        """Run the command to its end; the outcome fields for the state file."""
        cwd = Path(self.plan["cwd"])
        cwd.mkdir(parents=True, exist_ok=True)
        try:
            child = self._spawn(cwd)
        except OSError as exc:
            reason = f"cannot start {self.plan['argv'][0]}: {exc.strerror or exc}"
            return {"phase": Phase.FAILED.value, "reason": reason, "exit_code": 127}
        # An editor is RUNNING once it answers (`ServerWatch`), any other process at once.
        waiting = self.server is not None
        self.announce(
            phase=(Phase.INITIALIZING if waiting else Phase.RUNNING).value,
            reason=self._waiting_words() if waiting else "running",
            child_pid=child.pid,
            started_at=now_iso(),
        )
        code, timed_out = self._wait(child)
        finished = now_iso()
        _signal(child, signal.SIGKILL)  # leftovers of the process group(s)
        return self._outcome(code, timed_out) | {"finished_at": finished, "exit_code": code}

    def _waiting_words(self) -> str:
        if isinstance(self.server, HealthWatch):
            return "loading the model"
        return "waiting for the editor to answer"

    def _spawn(self, cwd: Path) -> Child:
        if self.plan.get("nodes"):
            self.group = NodeGroup(self.run, self.plan, cwd)
            return self.group
        with open(self.run / "output.log", "ab") as output:
            return subprocess.Popen(
                self.plan["argv"],
                cwd=cwd,
                env=self.plan["env"],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop reaches its children
            )

    def _wait(self, child: Child) -> tuple[int, bool]:
        timeout = self.plan.get("timeout_s")
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            try:
                code = exit_code(child.wait(timeout=POLL_S))
                self.pushes.finish()
                return code, False
            except subprocess.TimeoutExpired:
                pass
            timed_out = deadline is not None and time.monotonic() >= deadline
            if self.server is not None:
                self.unanswered = self.server.tick(self)
            if self.stopping() or timed_out or self.unanswered:
                code = exit_code(self._terminate(child))
                self.pushes.finish()
                return code, timed_out and not self.stopping()
            self.pushes.tick()

    def _terminate(self, child: Child) -> int:
        _signal(child, signal.SIGTERM)
        try:
            return child.wait(timeout=float(self.plan.get("grace_s", 10)))
        except subprocess.TimeoutExpired:
            _signal(child, signal.SIGKILL)
            return child.wait()

    def _outcome(self, code: int, timed_out: bool) -> dict[str, Any]:
        notebook = self.plan["ref"]["kind"] in ("notebook", "app")
        if self.stopping():
            return {"phase": Phase.STOPPED.value, "reason": "stopped at the user's request"}
        if self.unanswered:
            last = last_words(self.run / "output.log", workspace_dir(self.run))
            reason = f"{self.unanswered}: {last}" if last else self.unanswered
            return {"phase": Phase.FAILED.value, "reason": reason}
        if timed_out:
            reason = f"timed out after {self.plan['timeout_s']} s"
            return {"phase": Phase.FAILED.value, "reason": reason, "timed_out": True}
        if code == 0 and not notebook:
            return {"phase": Phase.SUCCEEDED.value, "reason": "exit code 0"}
        what = "exit code"
        if self.group is not None and self.group.failed_node is not None:
            failed = self.group.failed_node
            last = last_words(node_log(self.run, failed), workspace_dir(self.run))
            reason = f"node {failed}: exit code {code}"
            return {"phase": Phase.FAILED.value, "reason": f"{reason}: {last}" if last else reason}
        if notebook:
            server = "server" if self.plan["ref"]["kind"] == "app" else "editor"
            what = f"the {server} exited"
        reason = f"{what} ({code})" if notebook else f"{what} {code}"
        last = last_words(self.run / "output.log", workspace_dir(self.run))
        return {"phase": Phase.FAILED.value, "reason": f"{reason}: {last}" if last else reason}

    def push(self, outcome: dict[str, Any]) -> None:
        attempt = int((read_state(self.run) or {}).get("push_attempt") or 0) + 1
        # The run's own facts are known now: billing and the panel see them while pushing.
        facts = {k: outcome[k] for k in ("exit_code", "finished_at", "timed_out") if k in outcome}
        self.announce(
            phase=Phase.FINALIZING.value,
            reason=f"pushing rw volumes (attempt {attempt})",
            push_attempt=attempt,
            outcome=outcome,
            **facts,
        )
        log_path = self.run / "sync.log"
        start = log_path.stat().st_size if log_path.exists() else 0
        code, why = self.sync("push", self.plan["push"])
        if code == 0:
            self.finish({**outcome, "push_note": push_note(log_path, start)})
            return
        self.announce(phase=Phase.SYNC_FAILED.value, reason=f"final push failed: {why}")

    def sync(self, action: str, specs: list[str]) -> tuple[int, str]:
        """One run of the storage sync engine: its exit status and, when it failed, why."""
        log_path = self.run / "sync.log"
        start = log_path.stat().st_size if log_path.exists() else 0
        code = self._sync_process(action, specs, log_path)
        return code, ("" if code == 0 else sync_failure(log_path, start, code))

    def _sync_process(self, action: str, specs: list[str], log_path: Path) -> int:
        """Runs the engine to its end; a stop during a pull cuts it short."""
        process = self.start_sync(action, specs, log_path)
        while True:
            try:
                return process.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                if action == "pull" and self.stopping():
                    return self._terminate(process)

    def start_sync(self, action: str, specs: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        """The storage sync engine on `specs`, its JSON lines appended to `log_path`."""
        argv = [self.plan["python"], "-m", "storage.sync", action, *specs]
        # The manifests (the base of the three-way push) stay beside the root, outside it.
        argv += ["--root", self.plan["root"], "--state-dir", str(sync_state_dir(self.run))]
        argv.append("--allow-conflicts")  # the run's note (push_note), not a failed push
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                argv,
                env=self.plan["sync_env"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def finish(self, outcome: dict[str, Any]) -> None:
        self.announce(**outcome)


class PeriodicPush:
    """The rw volumes pushed every `push_every_s` while the process runs (three-way, against
    the same manifests as the final push, which each push moves forward), so a notebook's or
    a job's work reaches the bucket before it ends, as the sync sidecar does on a cluster.

    One push at a time, never blocking the supervisor's loop; the final push waits for the one
    in flight. A failed push is recorded in the state (`periodic_push`) and tried again at the
    next period: the run goes on, and the final push decides."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        every = int(supervisor.plan.get("push_every_s") or 0)
        self.every = every if supervisor.plan["push"] else 0
        self.next_at = time.monotonic() + self.every
        self.process: subprocess.Popen[bytes] | None = None
        self.log_start = 0

    def tick(self) -> None:
        if not self.every:
            return
        if self.process is not None and self.process.poll() is not None:
            self._record(self.process.returncode)
        if self.process is None and time.monotonic() >= self.next_at:
            supervisor = self.supervisor
            log_path = supervisor.run / "sync.log"
            self.log_start = _size(log_path)
            self.process = supervisor.start_sync("push", supervisor.plan["push"], log_path)

    def finish(self) -> None:
        """Wait for the push in flight (the final push needs its manifests)."""
        if self.process is not None:
            self._record(self.process.wait())

    def _record(self, code: int) -> None:
        log_path = self.supervisor.run / "sync.log"
        record: dict[str, Any] = {"at": now_iso(), "ok": code == 0}
        if code != 0:
            record["error"] = sync_failure(log_path, self.log_start, code)
        update_state(self.supervisor.run, periodic_push=record)
        self.process = None
        self.next_at = time.monotonic() + self.every


class ServerWatch:
    """Asks the editor's REST API (`plan.editor_probe`) whether it answers, then every
    `every_s` what it last did, into the state file: `last_activity` (Jupyter's own, which
    counts requests, kernels and terminals; now while a kernel is busy, since a long cell
    prints nothing), `kernels`, `connections`. Its requests do not count as activity."""

    def __init__(self, probe: dict[str, Any]) -> None:
        self.api = str(probe["api"])
        self.token = str(probe["token"])
        self.every = float(probe.get("every_s") or 10)
        self.ready_s = float(probe.get("ready_s") or 180)
        self.ready_by: float | None = None  # counted from the first look, after the pull
        self.ready = False
        self.next_at = 0.0
        self.seen: dict[str, Any] = {}

    def tick(self, supervisor: Supervisor) -> str:
        """One look when due; why the editor failed to start, or ''."""
        now = time.monotonic()
        if now < self.next_at:
            return ""
        if self.ready_by is None:
            self.ready_by = now + self.ready_s
        status = self._get("status")
        if not self.ready:
            if status is None:
                self.next_at = now + POLL_S
                if now < self.ready_by:
                    return ""
                return "the editor did not answer on its port in time"
            self.ready = True
        if status is not None:
            activity = self._activity(status)
            if not self.seen:
                supervisor.announce(phase=Phase.RUNNING.value, reason="running", **activity)
            elif activity != self.seen:
                update_state(supervisor.run, **activity)
            self.seen = activity
        self.next_at = time.monotonic() + self.every
        return ""

    def _activity(self, status: dict[str, Any]) -> dict[str, Any]:
        kernels = int(status.get("kernels") or 0)
        last = _utc_iso(str(status.get("last_activity") or ""))
        if kernels and self._busy_kernels():
            last = now_iso()
        return {
            "last_activity": last,
            "kernels": kernels,
            "connections": int(status.get("connections") or 0),
        }

    def _busy_kernels(self) -> int:
        kernels = self._get("kernels?no_track_activity=1")
        if not isinstance(kernels, list):
            return 0
        return sum(1 for k in kernels if isinstance(k, dict) and k.get("execution_state") == "busy")

    def _get(self, path: str) -> Any:
        """The JSON answer of GET api/`path`, or None when it does not answer (yet)."""
        request = urllib.request.Request(  # noqa: S310 - http on 127.0.0.1, from the plan
            self.api + path, headers={"Authorization": f"token {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
                return json.loads(response.read())
        except (OSError, ValueError):
            return None


class HealthWatch:
    """An app's server: RUNNING once GET `health` answers 2xx (after its weights are
    loaded); failed when it has not within `ready_s`. Nothing is read afterwards."""

    def __init__(self, probe: dict[str, Any]) -> None:
        self.url = str(probe["health"])
        self.ready_s = float(probe.get("ready_s") or 300)
        self.ready_by: float | None = None
        self.ready = False
        self.next_at = 0.0

    def tick(self, supervisor: Supervisor) -> str:
        now = time.monotonic()
        if self.ready or now < self.next_at:
            return ""
        if self.ready_by is None:
            self.ready_by = now + self.ready_s
        try:
            with urllib.request.urlopen(self.url, timeout=2) as response:  # noqa: S310 - loopback
                answered = 200 <= response.status < 300
        except OSError:
            answered = False
        if answered:
            self.ready = True
            supervisor.announce(phase=Phase.RUNNING.value, reason="running")
            return ""
        self.next_at = now + 0.25
        return "" if now < self.ready_by else "the server did not answer its probe in time"


def _utc_iso(value: str) -> str | None:
    """Jupyter's timestamp ('...Z') as the state file writes times, or None."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC).isoformat(timespec="microseconds")


def exit_code(returncode: int) -> int:
    """Killed by signal N reads 128+N, as a shell or a container runtime reports it."""
    return 128 - returncode if returncode < 0 else returncode


def last_words(log: Path, workspace: Path) -> str:
    """The last non-empty line of a log (what a failing process said last), its paths the
    workload's own: written so before it is clipped, since a cut path no longer reads as one."""
    lines = _tail_lines(log, max(0, _size(log) - 8192))
    return _clip(as_workload(lines[-1], workspace)) if lines else ""


def sync_failure(log: Path, start: int, code: int) -> str:
    """Why a sync run failed, from its JSON lines written after `start`: the first failed
    file of a `result` line, else the message the engine printed (bad usage), else the code."""
    lines = _tail_lines(log, start)
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("event") != "result":
            continue
        if event.get("failed") or event.get("failures"):
            first = (event.get("failures") or [{}])[0]
            detail = f"{first.get('key', '?')}: {first.get('error', 'failed')}"
            if event.get("failed"):
                detail = f"{event['failed']} file(s) failed, first {detail}"
            return _clip(f"{event.get('spec')}: {detail}")
    plain = [line for line in lines if not line.lstrip().startswith("{")]
    return _clip(plain[-1]) if plain else f"the sync engine exited with {code}"


def sync_state_dir(run: Path) -> Path:
    """The sync engine's manifests of a run: beside `root`, so outside every volume."""
    return run / "sync"


def push_note(log: Path, start: int) -> str:
    """The conflicts of the push whose lines start at `start`, as the job's history says
    them ("" when there were none): from the engine's last `push` summary line."""
    summary: dict[str, Any] = {}
    for line in _tail_lines(log, start):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "push":
            summary = event
    return conflict_note(list(summary.get("conflicts") or []), summary.get("conflicts_total"))


def _tail_lines(log: Path, start: int) -> list[str]:
    try:
        with open(log, "rb") as handle:
            handle.seek(start)
            text = handle.read(1024 * 1024).decode(errors="replace")
    except FileNotFoundError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


Child = subprocess.Popen[bytes] | NodeGroup


def _signal(child: Child, sig: signal.Signals) -> None:
    """`sig` to the child's process group, or to every node's."""
    if isinstance(child, NodeGroup):
        child.kill_leftovers() if sig == signal.SIGKILL else child.signal(sig)
    else:
        _kill_group(child.pid, sig)


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _detach(run: Path) -> None:
    """Double fork: the caller's child exits at once, the grandchild belongs to no one."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    log = os.open(run / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    run = Path(args[0])
    if "--foreground" not in args:
        _detach(run)
    try:
        supervisor = Supervisor(run)
        supervisor.push_only() if "--push-only" in args else supervisor.run_all()
    except Exception as exc:
        traceback.print_exc()
        update_state(run, phase=Phase.ERROR.value, reason=f"local supervisor failed: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
