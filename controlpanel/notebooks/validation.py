"""What a request to create a notebook must say (`validate_notebook`): the shared checks
(engine/validation.py, errors under the same stable keys as a job's: `volumes.0`, `env.NAME`)
and a notebook's own, its image and its editor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from controlpanel.engine import contract
from controlpanel.engine.validation import (
    Errors,
    check_env,
    check_flavor,
    check_gpu,
    check_labels,
    check_name,
    check_volumes,
)
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.models import NotebookImage
from controlpanel.projects.models import Project
from deploy.local.editors import editor_problem
from deploy.types import Editor
from storage.volumes import VolumeSpec

# The editor's token file is its own (deploy/manifests/notebooks.py): JUPYTER_TOKEN would
# replace it, so neither name is the user's to set.
EDITOR_ENV = ("JUPYTER_TOKEN", "JUPYTER_TOKEN_FILE")


# What a create request may say (the API's request serializer, so its schema, is built from
# this); validate_notebook checks it, with its errors under the same keys.
FIELDS: tuple[contract.Field, ...] = (
    contract.name_field("notebook"),
    contract.image_field(
        "A notebook image's name (default `python`); the panel's admins keep the list.", 50
    ),
    contract.Field(
        "editor",
        "text",
        "`jupyterlab` (default) or `vscode`, as the image serves.",
        choices=tuple(e.value for e in Editor),
    ),
    *(contract.SHARED[name] for name in ("flavor", "gpu", "volumes", "env", "labels")),
)


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
    return editor_problem(Editor(editor))


def validate_notebook(*, project: Project, data: Mapping[str, Any]) -> NotebookSpec:
    """Check a create request (the API's JSON, or a form's values) for `project`."""
    errors = Errors()
    image = errors.check("image", _image, data.get("image") or "python")
    errors.check("editor", _editor, data.get("editor") or Editor.JUPYTERLAB, image)
    flavor = errors.check("flavor", check_flavor, data.get("flavor"))
    errors.check("gpu", check_gpu, data.get("gpu", 1), flavor, project)
    check_volumes(errors, data.get("volumes") or [], project)
    errors.check("name", check_name, data.get("name"), "notebook")
    env = check_env(errors, data.get("env") or {}, project)
    for key in EDITOR_ENV:
        if key in env:
            errors.add(f"env.{key}", f"{key} is reserved: the panel sets the editor's token.")
    check_labels(errors, data.get("labels") or {})
    return errors.spec(NotebookSpec)


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
