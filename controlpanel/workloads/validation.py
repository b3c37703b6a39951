"""Checks on a job submission, shared by the form, the API and (through the API) the CLI.

Each problem is reported under the field it concerns, with a message that says what is wrong;
nothing is saved unless everything is valid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from controlpanel.core.validators import validate_visible_name
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import NAME_RULE_FOR_SECRETS, SECRET_NAME_RE, Project
from controlpanel.projects.selectors import secret_names
from controlpanel.workloads.datastores import check_volume_access
from controlpanel.workloads.models import DEFAULT_TIMEOUT_S, Preset
from controlpanel.workloads.presets import clean_finetune, finetune_command
from deploy import images
from deploy.local.plan import local_argv, preset_problem
from storage.volumes import (
    VolumeSpec,
    VolumeSpecError,
    check_mount_paths,
    parse_volume_spec,
    render_volume_spec,
)

IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._\-/:@]*$", re.IGNORECASE)
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
RESERVED_ENV_PREFIXES = ("AJUSTE_DATASTORE_", "AWS_")
MAX_TIMEOUT_S = 30 * 24 * 3600
MAX_ARGS = 200
# An env value `secret:<name>` is the project secret <name>, never the literal text.
SECRET_PREFIX = "secret:"  # noqa: S105 (a prefix)


@dataclass
class JobInput:
    """A submission after cleaning: what services.job_submit stores."""

    name: str
    image: str
    command: list[str]
    flavor: Flavor
    gpu: int
    volumes: list[str]
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    timeout: int = DEFAULT_TIMEOUT_S
    preset: str = ""
    params: dict[str, Any] = field(default_factory=dict)


class _Errors:
    def __init__(self) -> None:
        self.by_field: dict[str, list[str]] = {}

    def add(self, name: str, message: str) -> None:
        self.by_field.setdefault(name, []).append(message)

    def check(self, name: str, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except ValidationError as exc:
            for message in exc.messages:
                self.add(name, message)
        return None


def clean_job(*, project: Project, data: dict[str, Any]) -> JobInput:
    """Validate raw submission data (form or API) for `project`; raise ValidationError."""
    errors = _Errors()
    preset = data.get("preset") or ""
    if preset not in Preset.values:
        errors.add("preset", f"Unknown preset {preset!r}; use 'finetune' or leave it empty.")
    flavor = errors.check("flavor", _flavor, data.get("flavor"))
    if preset == Preset.FINETUNE and flavor is not None:
        errors.check("flavor", _runs_the_finetune_image, flavor)
    gpu = errors.check("gpu", _gpu, data.get("gpu", 1), flavor, project)
    specs = errors.check("volumes", _volumes, data.get("volumes") or [], project) or []
    image = settings.AJUSTE_FINETUNE_IMAGE if preset == Preset.FINETUNE else data.get("image")
    cleaned = {
        "name": errors.check("name", _name, data.get("name"), image),
        "image": errors.check("image", _image, image),
        "command": errors.check("command", _command, data.get("command") or [], preset),
        "env": errors.check("env", _env, data.get("env") or {}, project),
        "labels": errors.check("labels", _labels, data.get("labels") or {}),
        "timeout": errors.check("timeout", _timeout, data.get("timeout")),
    }
    params: dict[str, Any] = {}
    if preset == Preset.FINETUNE and "volumes" not in errors.by_field:
        try:
            params = clean_finetune(params=data.get("params") or {}, volumes=specs)
        except ValidationError as exc:
            for key, messages in exc.message_dict.items():
                for message in messages:
                    errors.add(key, message)
    elif data.get("params") and preset != Preset.FINETUNE:
        errors.add("params", "Parameters are only taken by a preset.")
    if "image" not in errors.by_field:
        errors.check("image", _runs_on_this_backend, cleaned["image"])
        if "image" not in errors.by_field and runs_only_the_finetune_image():
            _local_preset_only(errors, preset, params, cleaned["env"])
    if errors.by_field:
        raise ValidationError(errors.by_field)
    return JobInput(
        flavor=flavor,
        gpu=gpu,
        volumes=[_render(s) for s in specs],
        preset=preset,
        params=params,
        **cleaned,
    )


def _render(spec: VolumeSpec) -> str:
    return render_volume_spec(spec)


def _flavor(name: Any) -> Flavor:
    if not name or not isinstance(name, str):
        raise ValidationError("Choose a flavor.")
    flavor = Flavor.objects.filter(name=name, enabled=True).first()
    if flavor is None:
        raise ValidationError(f"Unknown flavor {name!r}; `ajuste flavor list` shows them.")
    return flavor


def _runs_the_finetune_image(flavor: Flavor) -> Flavor:
    """The fine-tune image's CUDA build has no kernels for GPUs older than it supports."""
    needed = images.FINETUNE_MIN_COMPUTE_CAPABILITY
    if flavor.capability is not None and flavor.capability < needed:
        raise ValidationError(
            f"The fine-tune image (a CUDA 13 build) needs a GPU of compute capability "
            f"{needed[0]}.{needed[1]} or newer; {flavor.name}'s {flavor.gpu_model} has "
            f"{flavor.compute_capability}. Choose another flavor, or a custom image built for it."
        )
    return flavor


def _gpu(value: Any, flavor: Flavor | None, project: Project) -> int:
    units = _integer(value, "The GPU count")
    if units < 1:
        raise ValidationError("Ask for at least 1 unit.")
    if flavor is None:
        return units
    if units > flavor.max_units:
        raise ValidationError(f"{flavor.name} allows at most {flavor.max_units} units per job.")
    gpus = units * flavor.gpus_per_unit
    if gpus > settings.MAX_GPUS_PER_JOB:
        raise ValidationError(
            f"At most {settings.MAX_GPUS_PER_JOB} GPUs per job (asked for {gpus})."
        )
    if gpus > project.gpu_quota:
        raise ValidationError(
            f"This job needs {gpus} GPUs but the project's quota is "
            f"{project.gpu_quota}: it could never start."
        )
    return units


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValidationError(f"{what} must be a whole number.")
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        raise ValidationError(f"{what} must be a whole number, not {value!r}.") from None


def _volumes(raw: Any, project: Project) -> list[VolumeSpec]:
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise ValidationError(
            "Give volumes as a list of specs like bucket@ALIAS/prefix:/workspace/data:ro."
        )
    specs, messages = [], []
    for index, text in enumerate(raw, start=1):
        try:
            spec = parse_volume_spec(text)
            check_volume_access(project=project, spec=spec)
            specs.append(spec)
        except VolumeSpecError as exc:
            where = f" at character {exc.position + 1}" if exc.position is not None else ""
            messages.append(f"Volume {index} ({text!r}){where}: {exc.message}")
        except ValidationError as exc:
            messages.append(f"Volume {index} ({text!r}): {' '.join(exc.messages)}")
    if not messages:
        try:
            check_mount_paths(specs)
        except VolumeSpecError as exc:
            messages.append(exc.message)
    if messages:
        raise ValidationError(messages)
    return specs


def _name(value: Any, image: Any) -> str:
    name = (value or "").strip() if isinstance(value, str) or value is None else None
    if name is None:
        raise ValidationError("The name must be text.")
    if not name:
        name = str(image or "job").rsplit("/", 1)[-1].split(":")[0][:100] or "job"
    if len(name) > 100:
        raise ValidationError("Use at most 100 characters.")
    validate_visible_name(name)
    return name


def _image(value: Any) -> str:
    if not value or not isinstance(value, str):
        raise ValidationError("Give a container image, e.g. my-registry/my-image:latest.")
    value = value.strip()
    if len(value) > 300 or not IMAGE_RE.match(value):
        raise ValidationError(
            f"{value!r} is not a valid image reference (no spaces; letters, digits, . _ - / : @)."
        )
    return value


LOCAL_BACKEND_NOTE = (
    "Custom images need the Kubernetes backend (COMPUTE_BACKEND=kubernetes): this panel runs "
    f"jobs on its own machine, as its own user, where only the built-in fine-tune preset "
    f"({images.FINETUNE_IMAGE}) runs. Use the Fine-tune tab, or a cluster."
)
LOCAL_COMMAND_NOTE = (
    "Custom commands need the Kubernetes backend (COMPUTE_BACKEND=kubernetes): on this panel's "
    "machine a job runs as the panel's own user, beside its secrets, so only the fine-tune "
    "preset runs. Use the Fine-tune tab, or a cluster."
)


def runs_only_the_finetune_image() -> bool:
    """True on the local backend (the `make run` default): it runs no container. Read from the
    settings, not the backend: the web process never builds one (it has no cluster identity)."""
    return settings.COMPUTE_BACKEND == "local"


def _runs_on_this_backend(image: str) -> None:
    """Refused at submit what the backend would only fail at start."""
    if runs_only_the_finetune_image() and not local_argv(image, [], python="python"):
        raise ValidationError(f"{image} cannot run here. {LOCAL_BACKEND_NOTE}")


def _local_preset_only(
    errors: _Errors, preset: str, params: dict[str, Any], env: dict[str, str] | None
) -> None:
    """The local backend runs only the preset's own command (deploy/local/plan.py): say so at
    submit rather than fail at start."""
    if preset != Preset.FINETUNE:
        errors.add("command", LOCAL_COMMAND_NOTE)
        return
    problem = preset_problem(finetune_command(params=params), env or {})
    if problem and "env" not in errors.by_field:
        errors.add("env", problem[0].upper() + problem[1:] + ".")


def _command(value: Any, preset: str) -> list[str]:
    if preset == Preset.FINETUNE:
        if value:
            raise ValidationError("The fine-tune preset sets the command; use params instead.")
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ValidationError("Give the command as a list of arguments (strings).")
    if len(value) > MAX_ARGS or any(len(a) > 10_000 or "\x00" in a for a in value):
        raise ValidationError(f"At most {MAX_ARGS} arguments of up to 10,000 characters.")
    return list(value)


def _env(value: Any, project: Project) -> dict[str, str]:
    """NAME=value pairs, stored as typed; a value `secret:<name>` references the project's
    secret of that name (checked here, resolved only at launch: the job keeps the name)."""
    if not isinstance(value, dict):
        raise ValidationError("Give env as NAME=value pairs.")
    problems = []
    known: set[str] | None = None
    for key, val in value.items():
        if not isinstance(key, str) or not ENV_KEY_RE.match(key):
            problems.append(f"{key!r} is not a valid variable name (letters, digits, _).")
        elif key.startswith(RESERVED_ENV_PREFIXES):
            problems.append(f"{key} is reserved: credentials reach jobs only through volumes.")
        elif not isinstance(val, str) or len(val) > 32_768 or "\x00" in val:
            problems.append(f"The value of {key} must be text of at most 32,768 characters.")
        elif secret_reference(val) is not None:
            known = secret_names(project=project) if known is None else known
            problem = _secret_problem(key, secret_reference(val) or "", known)
            if problem:
                problems.append(problem)
    if problems:
        raise ValidationError(problems)
    return dict(value)


def secret_reference(value: str) -> str | None:
    """The secret name a `secret:<name>` env value references, or None for plain text."""
    return value[len(SECRET_PREFIX) :] if value.startswith(SECRET_PREFIX) else None


def _secret_problem(key: str, name: str, known: set[str]) -> str | None:
    if not re.fullmatch(SECRET_NAME_RE, name):
        return f"{key}: {name!r} is not a secret name. {NAME_RULE_FOR_SECRETS}"
    if name not in known:
        return (
            f"{key}: this project has no secret named {name}; its managers set secrets on the "
            "project page."
        )
    return None


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValidationError("Give labels as key=value pairs.")
    problems = [
        f"Label {key!r}={val!r}: keys and values are up to 63 letters, digits, - _ . "
        "starting and ending with a letter or digit."
        for key, val in value.items()
        if not (
            isinstance(key, str)
            and key
            and LABEL_RE.fullmatch(key)
            and isinstance(val, str)
            and LABEL_RE.fullmatch(val)
        )
    ]
    if len(value) > 32:
        problems.append("At most 32 labels.")
    if problems:
        raise ValidationError(problems)
    return dict(value)


def _timeout(value: Any) -> int:
    if value in (None, ""):
        return DEFAULT_TIMEOUT_S
    seconds = _integer(value, "The timeout")
    if not 60 <= seconds <= MAX_TIMEOUT_S:
        raise ValidationError(f"The timeout must be between 60 s and {MAX_TIMEOUT_S} s (30 days).")
    return seconds
