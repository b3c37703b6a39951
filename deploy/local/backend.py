"""`LocalBackend`: the embedded `ComputeBackend` of `make run`, running workloads as processes
on this machine. See `paths` (layout, /workspace rewriting), `supervisor` (the detached
process per run) and `state` (the state file that survives panel restarts)."""

from __future__ import annotations

import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from deploy import images
from deploy.local import runs
from deploy.local.apps import app_argv, app_probe, app_problem
from deploy.local.editors import editor_problem
from deploy.local.gpus import Gpu, detect_gpus, pick_gpus
from deploy.local.group import node_envs
from deploy.local.machine import machine_capacity
from deploy.local.paths import run_dir, secret_file
from deploy.local.plan import (
    editor_argv,
    editor_env,
    editor_probe,
    local_argv,
    make_plan,
    preset_problem,
    ref_dict,
    slashed,
)
from deploy.local.state import State, now_iso, read_json, read_state, update_state, write_json
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
    WorkloadKind,
    WorkloadRef,
)

POLL_S = 1.0


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
                self._start_job(job, run)
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
        if ref.kind is WorkloadKind.APP:
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
        run = run_dir(self.base, notebook.ref)
        with runs.locked(run):
            state = read_state(run)
            active = state is not None and not Phase(state["phase"]).is_final
            if notebook.running and not (active and not (state or {}).get("waiting")):
                self._start_notebook(notebook, run, state or {})
        if not notebook.running:
            self._stop(run)
        return self.observe_notebook(ref=notebook.ref)

    def delete_notebook(self, *, ref: WorkloadRef) -> None:
        self._delete(run_dir(self.base, ref))

    def observe_notebook(self, *, ref: WorkloadRef) -> ObservedWorkload:
        return runs.observation(ref, read_state(run_dir(self.base, ref)))

    def apply_app(self, *, app: AppRequest) -> ObservedWorkload:
        """One replica on this machine whatever the scaling says (a machine has nothing to
        spread replicas over); the same port after a stop when it is still free."""
        run = run_dir(self.base, app.ref)
        with runs.locked(run):
            state = read_state(run)
            active = state is not None and not Phase(state["phase"]).is_final
            if app.running and not (active and not (state or {}).get("waiting")):
                self._start_app(app, run, state or {})
        if not app.running:
            self._stop(run)
        return self.observe_app(ref=app.ref)

    def delete_app(self, *, ref: WorkloadRef) -> None:
        self._delete(run_dir(self.base, ref))

    def observe_app(self, *, ref: WorkloadRef) -> ObservedWorkload:
        return runs.observation(ref, read_state(run_dir(self.base, ref)))

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

    def _start_job(self, job: JobRequest, run: Path) -> None:
        argv = local_argv(job.image, job.command, python=self.python)
        if argv is None:
            self._decide(job.ref, run, Phase.FAILED, _needs_kubernetes(job.image))
            return
        env = {**job.env, **dict.fromkeys(job.secret_env, "")}  # the names, for the check
        problem = None if self.any_command else preset_problem(job.command, env)
        if not problem:
            env, problem = self._with_secrets(job)
        if problem:
            self._decide(job.ref, run, Phase.FAILED, problem)
            return
        gpus = self._gpus_for(job.ref, run, job.flavor, job.units * job.nodes)
        if gpus is None:
            return
        plan = make_plan(
            nodes=self._nodes(job, gpus),
            ref=job.ref,
            run=run,
            argv=argv,
            env=env,
            volumes=job.volumes,
            pushed=job.pushed_volumes,
            gpus=gpus,
            sync_env=self._datastore_env(job.namespace, job.datastore_secret),
            timeout_s=job.timeout_s,
            python=self.python,
            grace_s=self.grace_s,
            push_every_s=job.push_every_s,
        )
        runs.launch(run, plan, python=self.python, extra={})

    def _nodes(self, job: JobRequest, gpus: list[int]) -> list[dict[str, str]]:
        """Each node's env for a job of several nodes (`group`); none for one node."""
        if job.nodes <= 1:
            return []
        per_node = max(job.units * job.flavor.gpus_per_unit, 1)
        rdzv = f"{job.id}-{job.run}"
        port, grace = _port(None), self.grace_s
        return node_envs(
            nodes=job.nodes, per_node=per_node, rdzv_id=rdzv, port=port, gpus=gpus, grace_s=grace
        )

    def _start_notebook(self, notebook: NotebookRequest, run: Path, previous: State) -> None:
        env, missing = self._with_secrets(notebook)
        missing = _missing_editor(notebook) or missing
        if missing:
            self._decide(notebook.ref, run, Phase.FAILED, missing)
            return
        gpus = self._gpus_for(notebook.ref, run, notebook.flavor, notebook.units)
        if gpus is None:
            return
        # The same port and token as the last run when the port is free: the same URL.
        port = _port(previous.get("port"))
        # The panel's token when it sends one (the request field is newer than this backend).
        token = str(getattr(notebook, "token", "") or previous.get("token") or uuid.uuid4().hex)
        argv = editor_argv(notebook, python=self.python, port=port)
        url = f"http://127.0.0.1:{port}{slashed(notebook.path)}"
        if notebook.command is None and notebook.editor.value == "jupyterlab":
            url += f"?token={token}"
        plan = make_plan(
            ref=notebook.ref,
            run=run,
            argv=argv,
            env={**env, **editor_env(notebook, run=run, token=token)},
            volumes=notebook.volumes,
            pushed=notebook.pushed_volumes,
            gpus=gpus,
            sync_env=self._datastore_env(notebook.namespace, notebook.datastore_secret),
            timeout_s=None,
            python=self.python,
            grace_s=self.grace_s,
            push_every_s=notebook.push_every_s,
            probe=editor_probe(notebook, port=port, token=token),
        )
        extra = {"port": port, "token": token, "url": url}
        runs.launch(run, plan, python=self.python, extra=extra)

    def _start_app(self, app: AppRequest, run: Path, previous: State) -> None:
        env, missing = self._with_secrets(app)
        missing = app_problem(app) or missing
        if missing:
            self._decide(app.ref, run, Phase.FAILED, missing)
            return
        gpus = self._gpus_for(app.ref, run, app.flavor, app.units)
        if gpus is None:
            return
        port = _port(previous.get("port"))
        plan = make_plan(
            ref=app.ref,
            run=run,
            argv=app_argv(app, python=self.python, port=port),
            env=env,
            volumes=app.pulled_volumes,
            pushed=(),
            gpus=gpus,
            sync_env=self._datastore_env(app.namespace, app.datastore_secret),
            timeout_s=None,
            python=self.python,
            grace_s=self.grace_s,
            probe=app_probe(app, port=port),
        )
        extra = {"port": port, "url": f"http://127.0.0.1:{port}"}
        runs.launch(run, plan, python=self.python, extra=extra)

    def _gpus_for(
        self, ref: WorkloadRef, run: Path, flavor: FlavorSpec, units: int
    ) -> list[int] | None:
        """The GPU indices for the run, or None after recording why it waits."""
        gpus, why = pick_gpus(
            flavor, units, self.gpus() if flavor.gpus_per_unit else [], self._busy()
        )
        if gpus is None:
            self._decide(ref, run, Phase.PENDING, why, waiting=True)
        return gpus

    def _decide(
        self, ref: WorkloadRef, run: Path, phase: Phase, reason: str, *, waiting: bool = False
    ) -> None:
        """Record a run that does not start now (refused, or waiting for GPUs)."""
        state = {
            "phase": phase.value,
            "reason": reason,
            "waiting": waiting,
            "ref": ref_dict(ref),
            "created_at": now_iso(),
        }
        write_json(run / "state.json", state)

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

    def _with_secrets(
        self, job: JobRequest | NotebookRequest | AppRequest
    ) -> tuple[dict[str, str], str | None]:
        """The job's env with each `secret_env` name set to the project secret's value (read
        from the file `ensure_project` wrote), or why it cannot start: a Secret missing the
        key is what keeps a Kubernetes pod from starting too. Values are never logged."""
        stored = self._datastore_env(job.namespace, job.project_secrets)
        missing = sorted(key for key in job.secret_env.values() if key not in stored)
        if missing:
            return {}, f"the project has no secret named {', '.join(missing)}"
        env = {k: v for k, v in job.env.items() if k not in job.secret_env}
        return env | {name: stored[key] for name, key in job.secret_env.items()}, None

    def _datastore_env(self, namespace: str, secret: str) -> dict[str, str]:
        data = read_json(secret_file(self.base, namespace, secret))
        return {str(k): str(v) for k, v in (data or {}).items()}


def _needs_kubernetes(image: str) -> str:
    return (
        f"the image {image} needs the Kubernetes backend (COMPUTE_BACKEND=kubernetes); the local "
        f"backend runs only the built-in fine-tune image {images.FINETUNE_IMAGE}"
    )


def _missing_editor(notebook: NotebookRequest) -> str:
    """Why the editor cannot start here, or '' (a notebook's own command is tried as is)."""
    return "" if notebook.command is not None else editor_problem(notebook.editor)


def _port(previous: object) -> int:
    """The notebook's previous port when still free (same URL after a restart), else a new one."""
    if isinstance(previous, int) and _free(previous):
        return previous
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _free(port: int) -> bool:
    with socket.socket() as probe:
        # Like the servers themselves: a port in TIME_WAIT after a stop is free to reuse.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
