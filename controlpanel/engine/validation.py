"""Checks a job submission against the contract (contract.py), for the form, the API and
(through the API) the CLI: `validate_job` returns a JobSpec or raises JobSpecError with every
problem under its key (`volumes.0`, `env.HF_TOKEN`, `params.rank`); nothing is saved unless
everything is valid.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from controlpanel.core.validators import validate_visible_name
from controlpanel.engine.contract import (
    MAX_ARG_CHARS,
    MAX_ARGS,
    MAX_COMMAND_BYTES,
    MAX_ENV_BYTES,
    MAX_ENV_VALUE_BYTES,
    MAX_ENV_VARS,
    MAX_LABELS,
    MAX_TIMEOUT_S,
    MAX_VOLUMES,
    JobSpec,
    JobSpecError,
    field_of,
)
from controlpanel.engine.datastores import check_volume_access
from controlpanel.engine.models import DEFAULT_TIMEOUT_S, Preset
from controlpanel.engine.presets import clean_finetune, finetune_command
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import NAME_RULE_FOR_SECRETS, SECRET_NAME_RE, Project
from controlpanel.projects.selectors import secret_names
from deploy import images
from deploy.local.plan import local_argv, preset_problem
from storage.volumes import VolumeSpec, VolumeSpecError, check_mount_paths, parse_volume_spec

IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._\-/:@]*$", re.IGNORECASE)
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
RESERVED_ENV_PREFIXES = ("AJUSTE_DATASTORE_", "AWS_")
# An env value `secret:<name>` is the project secret <name>, never the literal text.
SECRET_PREFIX = "secret:"  # noqa: S105 (a prefix)
VOLUME_EXAMPLE = "bucket@ALIAS/prefix:/workspace/data:ro"


class _Errors:
    """Problems found so far, by error key."""

    def __init__(self) -> None:
        self.by_key: dict[str, list[str]] = {}

    def add(self, key: str, message: str) -> None:
        self.by_key.setdefault(key, []).append(message)

    def check(self, key: str, call: Callable[..., Any], *args: Any) -> Any:
        """`call(*args)`, its ValidationError's messages filed under `key` (then None)."""
        try:
            return call(*args)
        except ValidationError as exc:
            for message in exc.messages:
                self.add(key, message)
        return None

    def merge(self, error: ValidationError) -> None:
        for key, messages in error.message_dict.items():
            for message in messages:
                self.add(key, message)

    def has(self, name: str) -> bool:
        """Whether field `name` (or any part of it) has a problem."""
        return any(field_of(key) == name for key in self.by_key)


def validate_job(*, project: Project, data: Mapping[str, Any]) -> JobSpec:
    """Check a submission (the API's JSON, or a form's typed values) for `project`."""
    errors = _Errors()
    preset = data.get("preset") or ""
    if preset not in Preset.values:
        errors.add("preset", f"Unknown preset {preset!r}; use 'finetune' or leave it empty.")
    finetune = preset == Preset.FINETUNE
    flavor = errors.check("flavor", _flavor, data.get("flavor"))
    if finetune and flavor is not None:
        errors.check("flavor", _runs_the_finetune_image, flavor)
    gpu = errors.check("gpu", _gpu, data.get("gpu", 1), flavor, project)
    volumes = _volumes(errors, data.get("volumes") or [], project)
    image = settings.AJUSTE_FINETUNE_IMAGE if finetune else data.get("image")
    name = errors.check("name", _name, data.get("name"), image)
    image = errors.check("image", _image, image)
    command = _command(errors, data.get("command") or [], finetune)
    env = _env(errors, data.get("env") or {}, project)
    labels = _labels(errors, data.get("labels") or {})
    timeout = errors.check("timeout", _timeout, data.get("timeout"))
    params = _params(errors, preset, data.get("params"), volumes)
    if image is not None and runs_only_the_finetune_image():
        _local_checks(errors, image, preset, params, env)
    if errors.by_key:
        raise JobSpecError(errors.by_key)
    return JobSpec(
        name=name,
        image=image,
        command=command,
        flavor=flavor,
        gpu=gpu,
        volumes=tuple(volumes),
        env=env,
        labels=labels,
        timeout=timeout,
        preset=preset,
        params=params,
    )


def _params(
    errors: _Errors, preset: str, raw: Any, volumes: Sequence[VolumeSpec]
) -> dict[str, Any]:
    if preset != Preset.FINETUNE:
        if raw:
            errors.add("params", "Parameters are only taken by a preset.")
        return {}
    if errors.has("volumes"):
        return {}  # the preset's own volume checks would only repeat what is said
    try:
        params = clean_finetune(params=raw or {}, volumes=volumes)
    except ValidationError as exc:
        errors.merge(exc)
        return {}
    size = _size(finetune_command(params=params))
    if size > MAX_COMMAND_BYTES:
        errors.add("params", _too_big("The preset's command", size, MAX_COMMAND_BYTES))
    return params


def _size(texts: Sequence[str]) -> int:
    """Bytes of these strings as a process gets them (UTF-8, one NUL each)."""
    return sum(len(t.encode("utf-8", "surrogatepass")) + 1 for t in texts)


def _too_big(what: str, size: int, limit: int) -> str:
    return f"{what} is {size:,} bytes; the limit is {limit:,} ({limit // 1024} KiB)."


def _flavor(name: Any) -> Flavor:
    if isinstance(name, Flavor) and name.enabled:  # a form's choice, already looked up
        return name
    if not name or not isinstance(name, str):
        raise ValidationError("Choose a flavor.")
    # PostgreSQL refuses NUL in text: such a name is no flavor's.
    flavor = None if "\x00" in name else Flavor.objects.filter(name=name, enabled=True).first()
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


def _volumes(errors: _Errors, raw: Any, project: Project) -> list[VolumeSpec]:
    """The parsed specs; each problem under `volumes.<index>` (a mount path that collides
    with an earlier volume's is the later one's problem)."""
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        errors.add("volumes", f"Give volumes as a list of specs like {VOLUME_EXAMPLE}.")
        return []
    if len(raw) > MAX_VOLUMES:
        errors.add("volumes", f"At most {MAX_VOLUMES} volumes (there are {len(raw)}).")
        return []
    specs: list[VolumeSpec] = []
    for index, text in enumerate(raw):
        key = f"volumes.{index}"
        try:
            spec = parse_volume_spec(text)
            check_mount_paths([*specs, spec])
        except VolumeSpecError as exc:
            where = f" at character {exc.position + 1}" if exc.position is not None else ""
            errors.add(key, f"{text!r}{where}: {exc.message}")
            continue
        if errors.check(key, _access, project, spec):
            specs.append(spec)
    return specs


def _access(project: Project, spec: VolumeSpec) -> bool:
    check_volume_access(project=project, spec=spec)
    return True


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


def _local_checks(
    errors: _Errors, image: str, preset: str, params: dict[str, Any], env: dict[str, str]
) -> None:
    """Refused at submit what the local backend would only fail at start: it runs only the
    preset's own command (deploy/local/plan.py)."""
    if not local_argv(image, [], python="python"):
        errors.add("image", f"{image} cannot run here. {LOCAL_BACKEND_NOTE}")
    elif preset != Preset.FINETUNE:
        errors.add("command", LOCAL_COMMAND_NOTE)
    elif not (errors.has("env") or errors.has("params")):
        problem = preset_problem(finetune_command(params=params), env)
        if problem:
            errors.add("env", problem[0].upper() + problem[1:] + ".")


def _command(errors: _Errors, value: Any, finetune: bool) -> list[str]:
    if finetune:
        if value:
            errors.add("command", "The fine-tune preset sets the command; use params instead.")
        return []
    if not isinstance(value, list):
        errors.add("command", "Give the command as a list of arguments (strings).")
        return []
    if len(value) > MAX_ARGS:
        errors.add("command", f"At most {MAX_ARGS} arguments (there are {len(value)}).")
    for index, arg in enumerate(value):
        if not isinstance(arg, str) or "\x00" in arg:
            errors.add(f"command.{index}", f"{arg!r} is not an argument: give text (no NUL).")
        elif len(arg) > MAX_ARG_CHARS:
            errors.add(f"command.{index}", f"An argument has at most {MAX_ARG_CHARS:,} characters.")
    size = _size([a for a in value if isinstance(a, str)])
    if size > MAX_COMMAND_BYTES:
        errors.add("command", _too_big("The command", size, MAX_COMMAND_BYTES))
    return list(value)


def _env(errors: _Errors, value: Any, project: Project) -> dict[str, str]:
    """NAME=value pairs, stored as typed; a value `secret:<name>` references the project's
    secret of that name (checked here, resolved only at launch: the job keeps the name)."""
    if not isinstance(value, dict):
        errors.add("env", "Give env as NAME=value pairs.")
        return {}
    if len(value) > MAX_ENV_VARS:
        errors.add("env", f"At most {MAX_ENV_VARS} variables (there are {len(value)}).")
        return {}
    known: set[str] | None = None
    for key, val in value.items():
        problem = _env_problem(key, val)
        if problem is None and secret_reference(val) is not None:
            known = secret_names(project=project) if known is None else known
            problem = _secret_problem(key, secret_reference(val) or "", known)
        if problem:
            errors.add(f"env.{key}", problem)
    texts = [str(k) for k in value] + [v for v in value.values() if isinstance(v, str)]
    size = _size(texts) - len(texts)
    if size > MAX_ENV_BYTES:
        errors.add("env", _too_big("The environment (names and values)", size, MAX_ENV_BYTES))
    return dict(value)


def _env_problem(key: Any, val: Any) -> str | None:
    if not isinstance(key, str) or not ENV_KEY_RE.match(key):
        return f"{key!r} is not a valid variable name (letters, digits, _)."
    if key.startswith(RESERVED_ENV_PREFIXES):
        return f"{key} is reserved: credentials reach jobs only through volumes."
    if not isinstance(val, str) or "\x00" in val:
        return f"The value of {key} must be text (no NUL)."
    size = _size([val]) - 1
    if size > MAX_ENV_VALUE_BYTES:
        return _too_big(f"The value of {key}", size, MAX_ENV_VALUE_BYTES)
    return None


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


def _labels(errors: _Errors, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        errors.add("labels", "Give labels as key=value pairs.")
        return {}
    if len(value) > MAX_LABELS:
        errors.add("labels", f"At most {MAX_LABELS} labels (there are {len(value)}).")
    for key, val in value.items():
        if not (_label_text(key) and key and _label_text(val)):
            errors.add(
                f"labels.{key}",
                f"Label {key!r}={val!r}: keys and values are up to 63 letters, digits, - _ . "
                "starting and ending with a letter or digit.",
            )
    return dict(value)


def _label_text(text: Any) -> bool:
    return isinstance(text, str) and LABEL_RE.fullmatch(text) is not None


def _timeout(value: Any) -> int:
    if value in (None, ""):
        return DEFAULT_TIMEOUT_S
    seconds = _integer(value, "The timeout")
    if not 60 <= seconds <= MAX_TIMEOUT_S:
        raise ValidationError(f"The timeout must be between 60 s and {MAX_TIMEOUT_S} s (30 days).")
    return seconds
