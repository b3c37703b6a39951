"""What a job submission must say (`validate_job`): the shared checks (engine/validation.py),
then a job's own: its command, its timeout, its preset's parameters, and what the local backend
can run at all."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from controlpanel.engine import validation as shared
from controlpanel.engine.contract import (
    MAX_ARG_CHARS,
    MAX_ARGS,
    MAX_COMMAND_BYTES,
    MAX_TIMEOUT_S,
)
from controlpanel.engine.models import DEFAULT_TIMEOUT_S, Preset
from controlpanel.engine.validation import Errors, size_of, too_big, whole_number
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.contract import JobSpec
from controlpanel.jobs.datasets import dataset_problem
from controlpanel.jobs.nodes import check_nodes
from controlpanel.jobs.presets import clean_finetune, finetune_command
from controlpanel.projects.models import Project
from deploy import images
from deploy.local.plan import local_argv, preset_problem
from storage.volumes import VolumeSpec


def validate_job(*, project: Project, data: Mapping[str, Any]) -> JobSpec:
    """Check a submission (the API's JSON, or a form's typed values) for `project`."""
    errors = Errors()
    preset = data.get("preset") or ""
    if preset not in Preset.values:
        errors.add("preset", f"Unknown preset {preset!r}; use 'finetune' or leave it empty.")
    finetune = preset == Preset.FINETUNE
    flavor = errors.check("flavor", shared.check_flavor, data.get("flavor"))
    if finetune and flavor is not None:
        errors.check("flavor", _runs_the_finetune_image, flavor)
    gpu = errors.check("gpu", shared.check_gpu, data.get("gpu", 1), flavor, project)
    errors.check("nodes", check_nodes, data.get("nodes"), gpu, flavor, project)
    volumes = shared.check_volumes(errors, data.get("volumes") or [], project)
    image = settings.AJUSTE_FINETUNE_IMAGE if finetune else data.get("image")
    errors.check("name", shared.check_name, data.get("name"), image)
    image = errors.check("image", shared.check_image, image)
    command = _command(errors, data.get("command") or [], finetune)
    env = shared.check_env(errors, data.get("env") or {}, project)
    shared.check_labels(errors, data.get("labels") or {})
    errors.check("timeout", _timeout, data.get("timeout"))
    params = _params(errors, preset, data.get("params"), volumes)
    errors.check("preemptible", _preemptible, data.get("preemptible"), finetune)
    if image is not None and runs_only_the_finetune_image():
        _local_checks(errors, image, preset, params, env)
    if finetune and not errors.by_key:
        problem = dataset_problem(volumes)  # lists the bucket: only for an otherwise good one
        if problem:
            errors.add(*problem)
    return errors.spec(JobSpec, command=command, preset=preset, params=params)


def _preemptible(value: Any, finetune: bool) -> bool:
    """Given, a boolean; not given, the preset's default (a fine-tune checkpoints and resumes)."""
    if value is None or value == "":
        return finetune
    if not isinstance(value, bool):
        raise ValidationError(f"preemptible is true or false, not {value!r}.")
    return value


def _params(errors: Errors, preset: str, raw: Any, volumes: Sequence[VolumeSpec]) -> dict[str, Any]:
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
    size = size_of(finetune_command(params=params))
    if size > MAX_COMMAND_BYTES:
        errors.add("params", too_big("The preset's command", size, MAX_COMMAND_BYTES))
    return params


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
    errors: Errors, image: str, preset: str, params: dict[str, Any], env: dict[str, str]
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


def _command(errors: Errors, value: Any, finetune: bool) -> list[str]:
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
    size = size_of([a for a in value if isinstance(a, str)])
    if size > MAX_COMMAND_BYTES:
        errors.add("command", too_big("The command", size, MAX_COMMAND_BYTES))
    return list(value)


def _timeout(value: Any) -> int:
    if value in (None, ""):
        return DEFAULT_TIMEOUT_S
    seconds = whole_number(value, "The timeout")
    if not 60 <= seconds <= MAX_TIMEOUT_S:
        raise ValidationError(f"The timeout must be between 60 s and {MAX_TIMEOUT_S} s (30 days).")
    return seconds
