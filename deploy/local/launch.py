"""How a local run of each kind starts (`LocalBackend.apply_*`): the plan its supervisor
executes, made from the request (the command it may run, the project's secrets read from the
files `ensure_project` wrote, its GPUs, the ports of a notebook's editor or an app's server,
each node's env for a job of several nodes), or why it does not start now (`decide`)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from deploy import images
from deploy.local import runs
from deploy.local.apps import app_argv, app_probe, app_problem
from deploy.local.editors import editor_problem
from deploy.local.group import free_port, node_envs
from deploy.local.paths import secret_file
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
from deploy.local.state import State, now_iso, read_json, write_json
from deploy.types import (
    AppRequest,
    FlavorSpec,
    JobRequest,
    NotebookRequest,
    Phase,
    WorkloadRef,
)

# The GPU indices for a run, or None after recording why it waits (`LocalBackend._gpus_for`).
GpusFor = Callable[[WorkloadRef, Path, FlavorSpec, int], list[int] | None]

# A kind that serves on a port: a notebook or an app (`Launcher._open_server`).
_Server = TypeVar("_Server", NotebookRequest, AppRequest)


@dataclass(frozen=True)
class Launcher:
    """Starts runs under `base` with `python`; `any_command` lifts the preset-only rule
    (tests of the process machinery only)."""

    base: Path
    python: str
    grace_s: float
    any_command: bool
    gpus_for: GpusFor

    def job(self, job: JobRequest, run: Path) -> None:
        argv = local_argv(job.image, job.command, python=self.python)
        if argv is None:
            decide(job.ref, run, Phase.FAILED, _needs_kubernetes(job.image))
            return
        env = {**job.env, **dict.fromkeys(job.secret_env, "")}  # the names, for the check
        problem = None if self.any_command else preset_problem(job.command, env)
        if not problem:
            env, problem = self._with_secrets(job)
        if problem:
            decide(job.ref, run, Phase.FAILED, problem)
            return
        gpus = self.gpus_for(job.ref, run, job.flavor, job.units * job.nodes)
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

    def notebook(self, notebook: NotebookRequest, run: Path, previous: State) -> None:
        opened = self._open_server(notebook, run, previous, _missing_editor)
        if opened is None:
            return
        # The same port and token as the last run when the port is free: the same URL.
        env, gpus, port = opened
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

    def app(self, app: AppRequest, run: Path, previous: State) -> None:
        opened = self._open_server(app, run, previous, app_problem)
        if opened is None:
            return
        env, gpus, port = opened
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

    def _open_server(
        self, request: _Server, run: Path, previous: State, problem: Callable[[_Server], str | None]
    ) -> tuple[dict[str, str], list[int], int] | None:
        """A notebook's or app's env (its secrets set), GPUs and port (the last run's when
        free), or None when it does not start now: refused (FAILED, its problem first) or
        waiting for GPUs."""
        env, missing = self._with_secrets(request)
        missing = problem(request) or missing
        if missing:
            decide(request.ref, run, Phase.FAILED, missing)
            return None
        gpus = self.gpus_for(request.ref, run, request.flavor, request.units)
        if gpus is None:
            return None
        return env, gpus, _port(previous.get("port"))

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


def decide(
    ref: WorkloadRef, run: Path, phase: Phase, reason: str, *, waiting: bool = False
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
    return free_port()


def _free(port: int) -> bool:
    with socket.socket() as probe:
        # Like the servers themselves: a port in TIME_WAIT after a stop is free to reuse.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
