"""`LocalBackend`: the embedded `ComputeBackend` of `make run`, running workloads as processes
on this machine. See `paths` (layout, /workspace rewriting), `launch` (each kind's plan from
its request), `supervisor` (the detached process per run) and `state` (the state file that
survives panel restarts)."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from deploy import kinds
from deploy.local import runs
from deploy.local.gpus import Gpu, detect_gpus, pick_gpus
from deploy.local.launch import Launcher, decide
from deploy.local.machine import machine_capacity
from deploy.local.paths import run_dir, secret_file
from deploy.local.state import State, read_json, read_state, update_state, write_json
from deploy.types import (
    AppRequest,
    Capacity,
    ClusterCapacity,
    FlavorSpec,
    GpuPool,
    JobRequest,
    LogChunk,
    NotebookRequest,
    ObservedWorkload,
    Phase,
    ProjectRequest,
    WorkloadRef,
)

POLL_S = 1.0

R = TypeVar("R", NotebookRequest, AppRequest)


class LocalBackend:
    """Runs the built-in fine-tune image (and notebooks) as local processes under `base_dir`.

    Only CPU flavors and flavors whose GPUs this machine has (NVML or nvidia-smi) run; others
    wait PENDING with the reason. Notebooks run the editor from this Python environment (the
    request's image is not used) on 127.0.0.1.

    A job runs as this machine's user, beside the panel's secrets, so only the fine-tune
    preset's own command runs (`plan.preset_problem`); `any_command=True` lifts that for
    tests of the process machinery only.

    Every project shares this machine: `capacity()` is its cores and memory (or `cpus` and
    `memory_gib` when given), and the panel admits jobs only while their flavors fit in it.
    """

    name = "local"

    def __init__(
        self,
        *,
        base_dir: Path,
        python: str = sys.executable,
        grace_s: float = 10.0,
        gpus: Callable[[], list[Gpu]] = detect_gpus,
        any_command: bool = False,
        cpus: int = 0,
        memory_gib: int = 0,
    ) -> None:
        self.base = Path(base_dir)
        self.machine = machine_capacity(cpus=cpus, memory_gib=memory_gib)
        self.any_command = any_command
        self.python = python
        self.grace_s = grace_s
        self.gpus = gpus
        self.launch = Launcher(
            base=self.base,
            python=python,
            grace_s=grace_s,
            any_command=any_command,
            gpus_for=self._gpus_for,
        )

    def capacity(self) -> Capacity:
        """The cores and memory jobs may use, and this machine's GPUs (read now)."""
        return replace(self.machine, gpus=tuple(gpu.name for gpu in self.gpus()))

    def cluster_capacity(self) -> ClusterCapacity:
        """This machine: its GPUs by product name (none is an answer), those its live runs
        hold, and its cores and memory (what jobs may use: AJUSTE_LOCAL_CPUS/_MEMORY_GIB)."""
        busy = self._busy()
        models: dict[str, list[int]] = {}
        for gpu in self.gpus():
            counts = models.setdefault(gpu.name, [0, 0])
            counts[0] += 1
            counts[1] += gpu.index in busy
        pools = tuple(
            GpuPool(name, total, in_use, nodes=1)
            for name, (total, in_use) in sorted(models.items())
        )
        return ClusterCapacity(
            backend=self.name,
            pools=pools,
            millicpu=self.machine.millicpu,
            memory_mib=self.machine.memory_mib,
            nodes=1,
        )

    def ensure_project(self, *, project: ProjectRequest) -> None:
        env: dict[str, str] = {}
        for datastore in project.datastores:
            env.update(datastore.to_env())
        path = secret_file(self.base, project.namespace, project.datastore_secret)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_json(path, env, private=True)
        # The managers' secrets, like the Secret jobs read with secretKeyRef (0600).
        secrets = secret_file(self.base, project.namespace, project.project_secrets)
        write_json(secrets, dict(project.secrets), private=True)

    def apply_job(self, *, job: JobRequest) -> ObservedWorkload:
        run = run_dir(self.base, job.ref)
        with runs.locked(run):
            state = read_state(run)
            if state is None or state.get("waiting"):
                self.launch.job(job, run)
        return self.observe_job(ref=job.ref)

    def stop_job(self, *, job: JobRequest) -> None:
        self._stop(run_dir(self.base, job.ref))

    def retry_push(self, *, job: JobRequest) -> None:
        run = run_dir(self.base, job.ref)
        with runs.locked(run):
            state = read_state(run)
            if state is None or state["phase"] != Phase.SYNC_FAILED.value:
                return
            update_state(
                run, phase=Phase.FINALIZING.value, reason="retrying the push", supervisor_pid=None
            )
            runs.spawn(run, python=self.python, push_only=True)

    def delete_job(self, *, ref: WorkloadRef) -> None:
        self._delete(run_dir(self.base, ref))

    def stop_orphan(self, *, ref: WorkloadRef) -> bool:
        """The run's process stops; a job's or notebook's directory (workspace, outputs, log)
        stays. An app keeps nothing: its server and directory go at once."""
        run = run_dir(self.base, ref)
        if not kinds.spec(ref.kind).keeps_workspace:
            self._delete(run)
            return False
        self._stop(run)
        return run.exists()

    def delete_orphan(self, *, ref: WorkloadRef) -> None:
        self._delete(run_dir(self.base, ref))

    def release_workspace(self, *, ref: WorkloadRef) -> None:
        """Nothing to free: a local run's directory is this machine's disk, kept (outputs and
        log with it) until the job is deleted."""

    def observe_job(self, *, ref: WorkloadRef) -> ObservedWorkload:
        return runs.observation(ref, read_state(run_dir(self.base, ref)))

    def read_logs(
        self, *, ref: WorkloadRef, cursor: str | None, limit: int = 1000, fresh: bool = False
    ) -> LogChunk:
        run = run_dir(self.base, ref)  # the state file is read every time: always fresh
        return runs.read_log(run, read_state(run), cursor, limit)

    def apply_notebook(self, *, notebook: NotebookRequest) -> ObservedWorkload:
        return self._apply_server(notebook, self.launch.notebook)

    def delete_notebook(self, *, ref: WorkloadRef) -> None:
        self._delete(run_dir(self.base, ref))

    def observe_notebook(self, *, ref: WorkloadRef) -> ObservedWorkload:
        return runs.observation(ref, read_state(run_dir(self.base, ref)))

    def apply_app(self, *, app: AppRequest) -> ObservedWorkload:
        """One replica on this machine whatever the scaling says (a machine has nothing to
        spread replicas over); the same port after a stop when it is still free."""
        return self._apply_server(app, self.launch.app)

    def delete_app(self, *, ref: WorkloadRef) -> None:
        self._delete(run_dir(self.base, ref))

    def observe_app(self, *, ref: WorkloadRef) -> ObservedWorkload:
        return runs.observation(ref, read_state(run_dir(self.base, ref)))

    def _apply_server(
        self, request: R, launch: Callable[[R, Path, State], None]
    ) -> ObservedWorkload:
        """A notebook's or an app's apply: launched unless it is already up (not waiting),
        stopped when it should not run; its observation after."""
        run = run_dir(self.base, request.ref)
        with runs.locked(run):
            state = read_state(run)
            active = state is not None and not Phase(state["phase"]).is_final
            if request.running and not (active and not (state or {}).get("waiting")):
                launch(request, run, state or {})
        if not request.running:
            self._stop(run)
        return runs.observation(request.ref, read_state(run))

    def observe_all(self, *, namespace: str | None = None) -> list[ObservedWorkload]:
        result = []
        for state in self._states(namespace):
            result.append(runs.observation(runs.ref_from_state(state), state))
        return result

    def watch(
        self, *, stop: threading.Event, namespace: str | None = None, resync_s: float = 300.0
    ) -> Iterator[ObservedWorkload]:
        """Polls the state files each second: yields what changed, and everything again
        every `resync_s`."""
        seen: dict[WorkloadRef, ObservedWorkload] = {}
        resync_at = 0.0
        while not stop.is_set():
            if time.monotonic() >= resync_at:
                seen.clear()
                resync_at = time.monotonic() + resync_s
            for observed in self.observe_all(namespace=namespace):
                if seen.get(observed.ref) != observed:
                    seen[observed.ref] = observed
                    yield observed
            stop.wait(POLL_S)

    def _gpus_for(
        self, ref: WorkloadRef, run: Path, flavor: FlavorSpec, units: int
    ) -> list[int] | None:
        """The GPU indices for the run, or None after recording why it waits."""
        gpus, why = pick_gpus(
            flavor, units, self.gpus() if flavor.gpus_per_unit else [], self._busy()
        )
        if gpus is None:
            decide(ref, run, Phase.PENDING, why, waiting=True)
        return gpus

    def _busy(self) -> set[int]:
        busy: set[int] = set()
        for state in self._states(None):
            if not Phase(state["phase"]).is_final and not state.get("waiting"):
                busy.update(state.get("gpus") or [])
        return busy

    def _stop(self, run: Path) -> None:
        with runs.locked(run):
            state = read_state(run)
            if state is None or Phase(state["phase"]).is_final:
                return
            if state.get("waiting"):
                update_state(
                    run,
                    phase=Phase.STOPPED.value,
                    reason="stopped before it started",
                    waiting=False,
                )
                return
            runs.request_stop(run, state)

    def _delete(self, run: Path) -> None:
        if not run.exists():
            return
        with runs.locked(run):
            state = read_state(run)
            if state is not None:
                runs.kill(state)
            shutil.rmtree(run, ignore_errors=True)

    def _states(self, namespace: str | None) -> Iterator[State]:
        pattern = f"runs/{namespace or '*'}/*/state.json"
        for path in sorted(self.base.glob(pattern)):
            state = read_json(path)
            if state is not None and "ref" in state:
                yield state
