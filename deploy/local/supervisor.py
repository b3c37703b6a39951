"""The process that carries one local run, detached from the panel (double fork, own session),
so Celery tasks never wait on a workload and a panel restart loses nothing.

    python -m deploy.local.supervisor RUN_DIR [--push-only] [--foreground]

It pulls the volumes, runs the command (never through a shell) with its output in
`output.log`, pushes the rw volumes every `push_every_s` while it runs (`PeriodicPush`), tells
when a notebook's editor answers and what it last did (`probes.ServerWatch`: RUNNING only then),
enforces the timeout, honours a stop (SIGTERM to itself, or the `stop` file):
SIGTERM to the process group, SIGKILL after the grace period; then pushes rw volumes
(three-way, against the manifests the pull left in `<run>/sync`, outside the volumes; the
keys left alone as conflicts become `push_note`). Every step is recorded in `state.json`.
`--push-only` retries the final push after SYNC_FAILED.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from deploy import kinds
from deploy.local.group import NodeGroup, node_log
from deploy.local.paths import workspace_dir
from deploy.local.probes import POLL_S, HealthWatch, ServerWatch
from deploy.local.runlog import last_words, push_note, size, sync_failure, sync_state_dir
from deploy.local.state import now_iso, process_start_ticks, read_json, read_state, update_state
from deploy.types import Phase

# A local job's niceness (`_yield_to_the_panel`): the panel's processes first, under load.
JOB_NICE = 10


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
        if not kinds.spec(self.plan["ref"]["kind"]).server:
            _yield_to_the_panel()  # the run's processes inherit it, every node's included
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
        server = kinds.spec(self.plan["ref"]["kind"]).server  # "": a run that ends itself
        notebook = bool(server)
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
            if restarts := self.group.restarts:
                reason += f" (after {restarts} group restart{'s' if restarts != 1 else ''})"
            return {"phase": Phase.FAILED.value, "reason": f"{reason}: {last}" if last else reason}
        if notebook:
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
            self.log_start = size(log_path)
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


def exit_code(returncode: int) -> int:
    """Killed by signal N reads 128+N, as a shell or a container runtime reports it."""
    return 128 - returncode if returncode < 0 else returncode


Child = subprocess.Popen[bytes] | NodeGroup


def _yield_to_the_panel() -> None:
    """A job shares `make run`'s machine with the panel: it runs at JOB_NICE, so a training
    that takes every core leaves the pages, the API and the streams answering at once (they
    get the CPU first, the job the rest). Editors and model servers (someone waits on them)
    keep the panel's priority."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, max(current, JOB_NICE))


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
