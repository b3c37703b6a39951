"""Notebooks: what a request to create one must say (`validate_notebook`, errors under the
same stable keys as a job's: `volumes.0`, `env.NAME`), and the writes on them — create, start,
stop, delete. Each writes the desired state and enqueues work after commit; the workload
engine (admission, reconcile, observation, logs, runs) does the rest, as for jobs.

A notebook's life: STARTING (waiting for admission, then for its pod) → RUNNING → STOPPING →
STOPPED, and again from STARTING on the next start (a new run: billed and logged apart), at the
same address with the same workspace. DELETING removes its objects, then its row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.engine import contract
from controlpanel.engine.contract import JobSpecError
from controlpanel.engine.models import Notebook, NotebookImage, NotebookState
from controlpanel.engine.validation import (
    _env,
    _Errors,
    _flavor,
    _gpu,
    _labels,
    _name,
    _volumes,
)
from controlpanel.engine.writes import (
    workload_create,
    workload_delete,
    workload_locked,
    workload_start,
    workload_stop,
)
from controlpanel.flavors.models import Flavor
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project
from deploy.types import Editor
from storage.volumes import VolumeSpec, render_volume_spec

N = NotebookState
# The editor's token file is its own (deploy/manifests/notebooks.py): JUPYTER_TOKEN would
# replace it, so neither name is the user's to set.
EDITOR_ENV = ("JUPYTER_TOKEN", "JUPYTER_TOKEN_FILE")
_JOB_FIELDS = {spec.name: spec for spec in contract.FIELDS}
# What a create request may say (the API's request serializer, so its schema, is built from
# this); validate_notebook checks it, with its errors under the same keys.
FIELDS: tuple[contract.Field, ...] = (
    contract.Field("name", "text", "Defaults to `notebook`.", maximum=100),
    contract.Field(
        "image",
        "text",
        "A notebook image's name (default `python`); the panel's admins keep the list.",
        maximum=50,
    ),
    contract.Field(
        "editor",
        "text",
        "`jupyterlab` (default) or `vscode`, as the image serves.",
        choices=tuple(e.value for e in Editor),
    ),
    *(_JOB_FIELDS[name] for name in ("flavor", "gpu", "volumes", "env", "labels")),
)
# States a notebook can be started again from, and stopped from.
STARTABLE = frozenset({N.STOPPED, N.FAILED, N.ERROR})
STOPPABLE = frozenset({N.STARTING, N.RUNNING})


@dataclass(frozen=True)
class NotebookSpec:
    """A valid request: what `notebook_create` stores."""

    name: str
    image: NotebookImage
    editor: str
    flavor: Flavor
    gpu: int
    volumes: tuple[VolumeSpec, ...]
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def editor_unavailable(editor: str) -> str:
    """Why this panel cannot serve `editor`, or "" (the local backend runs the editor from
    this machine's own installation; a cluster runs the image's)."""
    if settings.COMPUTE_BACKEND != "local":
        return ""
    from deploy.local.editors import editor_problem

    return editor_problem(Editor(editor))


def validate_notebook(*, project: Project, data: Mapping[str, Any]) -> NotebookSpec:
    """Check a create request (the API's JSON, or a form's values) for `project`."""
    errors = _Errors()
    image = errors.check("image", _image, data.get("image") or "python")
    editor = errors.check("editor", _editor, data.get("editor") or Editor.JUPYTERLAB, image)
    flavor = errors.check("flavor", _flavor, data.get("flavor"))
    gpu = errors.check("gpu", _gpu, data.get("gpu", 1), flavor, project)
    volumes = _volumes(errors, data.get("volumes") or [], project)
    name = errors.check("name", _name, data.get("name"), "notebook")
    env = _env(errors, data.get("env") or {}, project)
    for key in EDITOR_ENV:
        if key in env:
            errors.add(f"env.{key}", f"{key} is reserved: the panel sets the editor's token.")
    labels = _labels(errors, data.get("labels") or {})
    if errors.by_key:
        raise JobSpecError(errors.by_key)
    return NotebookSpec(
        name=name,
        image=image,
        editor=editor,
        flavor=flavor,
        gpu=gpu,
        volumes=tuple(volumes),
        env=env,
        labels=labels,
    )


def _image(value: Any) -> NotebookImage:
    if isinstance(value, NotebookImage):
        return value
    image = None
    if isinstance(value, str) and "\x00" not in value:
        image = NotebookImage.objects.filter(name=value, enabled=True).first()
    if image is None:
        names = ", ".join(NotebookImage.objects.filter(enabled=True).values_list("name", flat=True))
        raise ValidationError(f"Unknown image {value!r}; choose one of: {names}.")
    return image


def _editor(value: Any, image: NotebookImage | None) -> str:
    if not isinstance(value, str) or value not in {e.value for e in Editor}:
        raise ValidationError(f"Unknown editor {value!r}; choose jupyterlab or vscode.")
    if image is not None and value not in image.editors:
        served = " and ".join(image.editors) or "no editor"
        raise ValidationError(f"The {image.label} image serves {served}, not {value}.")
    problem = editor_unavailable(value)
    if problem:
        raise ValidationError(problem)
    return str(value)


@transaction.atomic
def notebook_create(*, access: ProjectAccess, user: Any, data: Mapping[str, Any]) -> Notebook:
    """Validate and store a notebook, then start it through the project's quota."""
    spec = validate_notebook(project=access.project, data=data)
    notebook = Notebook(
        project=access.project,
        owner=user,
        name=spec.name,
        image=spec.image.image,
        editor=spec.editor,
        flavor=spec.flavor,
        gpu=spec.gpu,
        volumes=[render_volume_spec(v) for v in spec.volumes],
        env=spec.env,
        labels=spec.labels,
        params={"image": spec.image.name},
    )
    return workload_create(access=access, user=user, workload=notebook, reason="created")


def notebook_start(*, access: ProjectAccess, user: Any, notebook: Notebook) -> Notebook:
    """Start a stopped notebook again: a new run, same address, same workspace."""
    return workload_start(access=access, user=user, workload=notebook)


def notebook_stop(
    *, access: ProjectAccess | None, user: Any, notebook: Notebook, reason: str = ""
) -> Notebook:
    """Stop a notebook (its rw volumes are pushed, its workspace kept). `access` None: the
    panel itself stops it (idle), with `reason`."""
    return workload_stop(access=access, user=user, workload=notebook, reason=reason)


def notebook_delete(*, access: ProjectAccess, user: Any, notebook: Notebook) -> None:
    """Delete a notebook: its objects (workspace included), then its row. Its runs stay,
    for billing. A running notebook is stopped by the deletion (nothing is pushed)."""
    workload_delete(access=access, user=user, workload=notebook)


def idle_deadline(notebook: Notebook) -> datetime | None:
    """When the notebook stops if it stays idle: its last activity plus the project's limit
    (None: no limit, or the backend does not report the server's activity)."""
    minutes = notebook.project.notebook_idle_minutes
    if not minutes or notebook.last_activity_at is None or notebook.state != N.RUNNING:
        return None
    return notebook.last_activity_at + timedelta(minutes=minutes)


@transaction.atomic
def notebook_keep_alive(*, access: ProjectAccess, user: Any, notebook: Notebook) -> Notebook:
    """ "Keep it running": counts as activity now, so the idle stop waits a full limit again."""
    notebook = workload_locked(access=access, user=user, workload=notebook)
    if notebook.state != N.RUNNING:
        raise ValidationError(f"The notebook is {notebook.state}, not running.")
    notebook.last_activity_at = timezone.now()
    notebook.save(update_fields=["last_activity_at", "updated_at"])
    return notebook


def stop_idle_notebooks() -> int:
    """Stop the running notebooks idle past their project's limit (the sweep calls this);
    returns how many. A notebook whose activity is unknown is never stopped for idleness."""
    now, stopped = timezone.now(), 0
    running = Notebook.objects.filter(
        state=N.RUNNING, stop_requested=False, last_activity_at__isnull=False
    ).select_related("project")
    for notebook in running.exclude(project__notebook_idle_minutes=0):
        deadline = idle_deadline(notebook)
        if deadline is None or deadline > now:
            continue
        minutes = notebook.project.notebook_idle_minutes
        reason = f"stopped after {minutes} min idle (the project's limit)"
        try:
            notebook_stop(access=None, user=None, notebook=notebook, reason=reason)
        except ValidationError:
            continue  # it moved on meanwhile
        stopped += 1
    return stopped
