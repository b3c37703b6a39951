"""What a local run executes, decided up front by the backend and written to `plan.json`, so
the supervisor is a dumb executor and every decision is testable without processes."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from deploy import images
from deploy.local.paths import rewrite, rewrite_env, workspace_dir
from deploy.types import NotebookRequest, WorkloadRef
from storage.volumes import VolumeSpec, render_volume_spec
from training.options import OptionsError, parse_options

# The only host variables a workload inherits: the panel's own secrets stay out.
PASS_THROUGH = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "USER",
    "HF_HOME",
    "HF_HUB_OFFLINE",
)
PROJECT_ROOT = Path(__file__).resolve().parents[2]
FINETUNE_MODULE = ("-m", "training.finetune")


# Variables that choose what the interpreter, the loader or a compiler runs: a job on this
# machine may not set them (its code would run as the panel's OS user).
UNSAFE_ENV = re.compile(
    r"^(LD_|DYLD_|PYTHON|TRITON_|TORCHINDUCTOR_|TORCH_EXTENSIONS_DIR$|CUDA_|NCCL_|GCONV_PATH$"
    r"|PATH$|HOME$|TMPDIR$|CC$|CXX$|CPATH$|LIBRARY_PATH$|BASH_ENV$|ENV$|HOSTALIASES$"
    r"|LOCALDOMAIN$|RES_OPTIONS$|NODE_OPTIONS$|HF_HOME$|XDG_)"
)
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
WORKSPACE = PurePosixPath("/workspace")


def preset_problem(command: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why this is not a run of the built-in fine-tune preset, or None.

    The local backend runs only what the preset itself makes: `python -m training.finetune`
    with its options, reading and writing under /workspace, no model code, and no variable
    that changes what the interpreter loads. Anything else would run as the panel's OS user,
    beside its secret key and database."""
    options = list(command)
    if options[:3] in (
        ["python", "-m", "training.finetune"],
        ["python3", "-m", "training.finetune"],
    ):
        options = options[3:]
    elif options and not options[0].startswith("-"):
        return "the local backend runs only the fine-tune preset (python -m training.finetune)"
    unsafe = sorted(name for name in env if UNSAFE_ENV.match(name))
    if unsafe:
        return f"the local backend does not let a job set {', '.join(unsafe)}"
    try:
        opts = parse_options(options)
    except OptionsError as exc:
        return f"the fine-tune options are not valid: {exc}"
    except SystemExit:  # --help, --version: argparse would end this process
        return "the fine-tune options are not valid: give a run's options, not --help"
    if opts.trust_remote_code:
        return "the local backend does not run model code (--trust-remote-code)"
    paths = {"--data": opts.data, "--output": opts.output, "--eval-data": opts.eval_data}
    if not HUB_ID.match(opts.model):
        paths["--model"] = opts.model
    for flag, path in paths.items():
        if path is not None and not _in_workspace(path):
            return f"{flag} must be a path under /workspace on the local backend (got {path})"
    return None


def _in_workspace(path: str) -> bool:
    pure = PurePosixPath(path)
    return ".." not in pure.parts and pure.is_relative_to(WORKSPACE)


def base_env(extra_path: Path = PROJECT_ROOT) -> dict[str, str]:
    """Host variables that are safe to pass, plus our packages on PYTHONPATH."""
    env = {key: os.environ[key] for key in PASS_THROUGH if key in os.environ}
    paths = [str(extra_path), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def local_argv(image: str, command: Sequence[str], *, python: str) -> list[str] | None:
    """The command as this machine runs it, or None when the image needs a real container.

    Only the built-in fine-tune image runs locally: `python`/`python3` become this
    interpreter, and a command of bare options goes to `python -m training.finetune`."""
    if image != images.FINETUNE_IMAGE:
        return None
    if not command or command[0].startswith("-"):
        return [python, *FINETUNE_MODULE, *command]
    if command[0] in ("python", "python3"):
        return [python, *command[1:]]
    return list(command)


def make_plan(
    *,
    ref: WorkloadRef,
    run: Path,
    argv: list[str],
    env: Mapping[str, str],
    volumes: Sequence[VolumeSpec],
    pushed: Sequence[VolumeSpec],
    gpus: list[int],
    sync_env: Mapping[str, str],
    timeout_s: int | None,
    python: str = sys.executable,
    grace_s: float = 10.0,
    push_every_s: int = 0,
    probe: dict[str, Any] | None = None,
    nodes: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """The plan of one run: the user's env (paths rewritten) over the safe host variables;
    the sync engine alone gets the datastore credentials. `push_every_s` (0: never) pushes
    the rw volumes while the process runs; `probe` is `editor_probe`'s; `nodes` each node's
    env, for a job of several nodes (`group.node_envs`)."""
    workspace = workspace_dir(run)
    full_env = {**base_env(), **rewrite_env(env, workspace)}
    full_env.update(
        AJUSTE_WORKSPACE=str(workspace),
        AJUSTE_WORKLOAD_ID=ref.id,
        AJUSTE_PROJECT=ref.project,
        CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)),
        # CUDA numbers devices fastest first; NVML and nvidia-smi (our indices) by PCI bus.
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
    )
    return {
        "ref": ref_dict(ref),
        "argv": [rewrite(arg, workspace) for arg in argv],
        "env": full_env,
        "cwd": str(workspace),
        "root": str(run / "root"),
        "pull": [render_volume_spec(volume) for volume in volumes],
        "push": [render_volume_spec(volume) for volume in pushed],
        "sync_env": {**base_env(), **sync_env},
        "python": python,
        "timeout_s": timeout_s,
        "grace_s": grace_s,
        "gpus": gpus,
        "push_every_s": push_every_s if pushed else 0,
        "probe": probe,
        "nodes": [dict(node) for node in nodes],
    }


# JupyterLab's work at start that a notebook here does not need: the extension manager's
# lookups on PyPI (read-only: extensions come with the environment), the news feed and the
# update check (both would call the internet, which a panel machine may not reach).
JUPYTER_QUIET = (
    "--LabApp.extension_manager=readonly",
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
)
# How long a started JupyterLab has to answer /api/status before the start fails.
JUPYTER_READY_S = 180
# How often the supervisor asks a running JupyterLab what it last did.
ACTIVITY_EVERY_S = 10.0


def editor_argv(notebook: NotebookRequest, *, python: str, port: int) -> list[str]:
    """The editor on 127.0.0.1:`port`, serving /workspace under the notebook's path.

    JupyterLab reads its token from `JUPYTER_TOKEN` (`editor_env`), never from the command
    line, which every user of the machine can read in the process list. `port_retries=0`:
    a taken port fails the start instead of serving at an address nobody links to."""
    if notebook.command is not None:
        return [arg.replace("{port}", str(port)) for arg in notebook.command]
    if notebook.editor.value == "vscode":
        return ["code-server", f"--bind-addr=127.0.0.1:{port}", "--auth=none", "/workspace"]
    return [
        python,
        "-P",
        "-m",
        "deploy.local.jupyter",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.base_url={notebook.path}",
        "--ServerApp.root_dir=/workspace",
        # The local backend runs as the panel's user, root in a container: nothing to guard.
        "--ServerApp.allow_root=True",
        *JUPYTER_QUIET,
    ]


def editor_env(notebook: NotebookRequest, *, run: Path, token: str) -> dict[str, str]:
    """What the editor needs besides the notebook's env: JupyterLab's token, and its runtime
    files (kernel connection keys, the server's own file with the token) and settings in the
    run's directory, private to this notebook and outside /workspace."""
    if notebook.command is not None or notebook.editor.value != "jupyterlab":
        return {}
    return {
        "JUPYTER_TOKEN": token,
        "JUPYTER_RUNTIME_DIR": str(run / "jupyter" / "runtime"),
        "JUPYTER_CONFIG_DIR": str(run / "jupyter" / "config"),
    }


def editor_probe(notebook: NotebookRequest, *, port: int, token: str) -> dict[str, Any] | None:
    """How the supervisor tells the editor answers, and reads what it last did: JupyterLab's
    REST API under the notebook's path (None: an editor without one, RUNNING once started)."""
    if notebook.command is not None or notebook.editor.value != "jupyterlab":
        return None
    return {
        "api": f"http://127.0.0.1:{port}{slashed(notebook.path)}api/",
        "token": token,
        "ready_s": JUPYTER_READY_S,
        "every_s": ACTIVITY_EVERY_S,
    }


def slashed(path: str) -> str:
    """A URL path with one slash at each end ('/' stays '/'), as Jupyter's base_url."""
    inner = path.strip("/")
    return f"/{inner}/" if inner else "/"


def ref_dict(ref: WorkloadRef) -> dict[str, Any]:
    """A ref as stored in plan and state files."""
    return {
        "kind": ref.kind.value,
        "project": ref.project,
        "namespace": ref.namespace,
        "id": ref.id,
        "run": ref.run,
    }
