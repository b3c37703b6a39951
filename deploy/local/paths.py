"""Where a local run lives on disk, and how its process sees /workspace.

Path strategy: no mount namespace (it needs privileges `make run` does not have). Each run
gets a directory; the sync engine pulls with `--root <run>/root`, so `/workspace/data` lands
in `<run>/root/workspace/data`. Before the process starts, every argument and every env value
that names a path under `/workspace` (at the start of the value or after `=`, `:` or `,`) is
rewritten to that directory, the process starts in it, and `AJUSTE_WORKSPACE` names it. So
`--data /workspace/data` and `--output=/workspace/output` work unchanged; a path assembled at
run time from pieces ("/work" + "space") would not, which the fine-tune entry point never does.
The way back: what the process prints (its log, its last words) names that directory
`/workspace` again (`as_workload`), so the panel shows the workload's paths, as on a cluster,
and never this machine's.

Layout of `<base>`:
    projects/<namespace>/<secret>.json   the project's datastore env (0600), like the Secret
    runs/<namespace>/<name>/             one run (name: `job-<id>-r<run>` or `nb-<id>`)
        plan.json      what the supervisor executes (0600: holds the sync credentials)
        state.json     what happened so far, written atomically (see `state`)
        output.log     the process's stdout and stderr
        sync.log       the sync engine's JSON lines (pull and push)
        sync/          the sync engine's manifests (base of the three-way push): outside root,
                       so outside every volume
        supervisor.log the supervisor's own errors
        jupyter/       a notebook's JupyterLab runtime files (kernel keys) and settings
        stop           present once a stop was asked for
        root/workspace the volumes and the process's working directory
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path

from deploy import kinds, names
from deploy.types import WorkloadRef

WORKSPACE = "/workspace"
_WORKSPACE_PATH = re.compile(r"(?:(?<=^)|(?<=[=:,]))/workspace(?=/|$|[:,])")


def run_dir(base: Path, ref: WorkloadRef) -> Path:
    """The directory of one run (deterministic from the ref)."""
    leaf = kinds.spec(ref.kind).object_name(ref)
    return base / "runs" / names.dns_label(ref.namespace) / leaf


def secret_file(base: Path, namespace: str, secret: str) -> Path:
    """The local stand-in for a project's datastore Secret."""
    return base / "projects" / names.dns_label(namespace) / f"{names.dns_label(secret)}.json"


def workspace_dir(run: Path) -> Path:
    """What the process sees as /workspace."""
    return run / "root" / "workspace"


def rewrite(value: str, workspace: Path) -> str:
    """`value` with each /workspace path pointed at `workspace`."""
    return _WORKSPACE_PATH.sub(str(workspace).replace("\\", "\\\\"), value)


def rewrite_env(env: Mapping[str, str], workspace: Path) -> dict[str, str]:
    """Every env value rewritten (names untouched)."""
    return {key: rewrite(value, workspace) for key, value in env.items()}


def as_workload(text: str, workspace: Path) -> str:
    """`text` with each path under `workspace` (as given, or with symlinks resolved) written as
    the workload's own path under /workspace."""
    if "workspace" not in text:
        return text  # the common case, without a regex
    return _host_paths(workspace).sub(WORKSPACE, text)


@functools.lru_cache(maxsize=256)
def _host_paths(workspace: Path) -> re.Pattern[str]:
    spellings = sorted({str(workspace), os.path.realpath(workspace)}, key=len, reverse=True)
    alternatives = "|".join(re.escape(s) for s in spellings)
    return re.compile(rf"(?:{alternatives})(?![\w.-])")
