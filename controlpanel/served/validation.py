"""What a request to create an app must say (`validate_app`): the shared checks
(engine/validation.py, errors under stable keys like a job's) and an app's own: the weights (a
model's folder in a bucket, an adapter's), the served model's name, the probe, the port, how it
scales and whether it is public. What it serves and how it scales are kept in `params`
(config.py reads them); the weights are the first of its `volumes` (read-only, at
deploy.types.APP_MODEL_PATH and APP_ADAPTER_PATH), so every check that a volume is still the
project's covers them too."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from controlpanel.engine import contract
from controlpanel.engine import validation as shared
from controlpanel.engine.validation import Errors, whole_number
from controlpanel.projects.models import Project
from controlpanel.served.config import WEIGHT_PATHS
from controlpanel.served.models import AppImage
from controlpanel.served.weights import weights_problem
from deploy import images
from deploy.types import APP_ADAPTER_PATH, APP_MODEL_PATH, Scaling
from storage.volumes import Mode, VolumeSpec, VolumeSpecError, parse_volume_spec, render_volume_spec

MAX_REPLICAS = 10


MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")


PROBE_PATH_RE = re.compile(r"^/[A-Za-z0-9._~/-]{0,199}$")


SCALING_MODES = ("fixed", "cpu", "rps")


BUCKET_PATH = "<bucket>@<ALIAS>[/<prefix>]"


FIELDS: tuple[contract.Field, ...] = (
    contract.name_field("app"),
    contract.image_field(
        "The server's image (default: Ajuste's serving image, vLLM with LoRA adapters).", 300
    ),
    contract.Field(
        "model",
        "text",
        f"The model's folder in a bucket, {BUCKET_PATH}: a base model (with `adapter`) or a "
        "merged one.",
        required=True,
        maximum=400,
    ),
    contract.Field(
        "adapter", "text", f"A LoRA adapter's folder, {BUCKET_PATH} (optional).", maximum=400
    ),
    contract.Field(
        "model_name",
        "text",
        "The model's id in the API (`model` of a request); defaults to the app's name.",
        maximum=100,
    ),
    *(contract.SHARED[name] for name in ("flavor", "gpu")),
    contract.Field(
        "volumes", "texts", "More read-only volume specs (`:ro`).", maximum=contract.MAX_VOLUMES
    ),
    *(contract.SHARED[name] for name in ("env", "labels")),
    contract.Field("probe_path", "text", "The HTTP path that answers once ready.", maximum=200),
    contract.Field("port", "integer", "The server's port (default 8000).", minimum=1024),
    contract.Field(
        "scaling",
        "text",
        "`fixed` (`replicas`), or autoscaled between `min_replicas` and `max_replicas` on "
        "`cpu` (`target_cpu` %) or `rps` (`target_rps` per replica).",
        choices=SCALING_MODES,
    ),
    contract.Field("replicas", "integer", "Fixed replicas, 1 to 10.", minimum=1, maximum=10),
    contract.Field("min_replicas", "integer", "0 (scale to zero) to 10.", minimum=0, maximum=10),
    contract.Field("max_replicas", "integer", "1 to 10.", minimum=1, maximum=10),
    contract.Field("target_cpu", "integer", "CPU % per replica.", minimum=1, maximum=100),
    contract.Field("target_rps", "integer", "Requests/s per replica.", minimum=1),
    contract.Field(
        "public",
        "text",
        "`true`: anyone with the URL may call it; `false` (default): the project's API tokens.",
        choices=("true", "false"),
    ),
)


@dataclass(frozen=True)
class AppSpec:
    """A valid request: what `app_create` stores."""

    name: str
    image: str
    flavor: Any
    gpu: int
    volumes: tuple[VolumeSpec, ...]
    env: dict[str, str]
    labels: dict[str, str]
    params: dict[str, Any]


def validate_app(*, project: Project, data: Mapping[str, Any]) -> AppSpec:
    """Check a create request (the API's JSON, or a form's values) for `project`."""
    errors = Errors()
    name = errors.check("name", shared.check_name, data.get("name"), "app")
    errors.check("image", _app_image, data.get("image") or images.SERVING_IMAGE)
    flavor = errors.check("flavor", shared.check_flavor, data.get("flavor"))
    errors.check("gpu", shared.check_gpu, data.get("gpu", 1), flavor, project)
    weights = _weights(errors, data, project)
    volumes = shared.check_volumes(errors, data.get("volumes") or [], project)
    for index, spec in enumerate(volumes):
        if spec.mode != Mode.RO:
            errors.add(f"volumes.{index}", "An app's volumes are read-only (:ro).")
        if any(spec.mount_path.startswith(path) for path in WEIGHT_PATHS):
            errors.add(f"volumes.{index}", f"{spec.mount_path} is where the weights go.")
    shared.check_env(errors, data.get("env") or {}, project)
    shared.check_labels(errors, data.get("labels") or {})
    model_name = errors.check("model_name", _model_name, data.get("model_name"), name)
    probe = errors.check("probe_path", _probe_path, data.get("probe_path") or "/health")
    port = errors.check("port", _port, data.get("port") or 8000)
    scaling = _scaling(errors, data)
    public = errors.check("public", _boolean, data.get("public", False))
    model, adapter = weights
    if model is not None and not errors.by_key:
        problem = weights_problem(model=model, adapter=adapter)  # lists the bucket: last
        if problem:
            errors.add(*problem)
    errors.raise_any()
    assert model is not None
    params = {
        "model": _bucket_path(model),
        "adapter": _bucket_path(adapter) if adapter else "",
        "model_name": model_name,
        "probe_path": probe,
        "port": port,
        "scaling": {
            "min_replicas": scaling.min_replicas,
            "max_replicas": scaling.max_replicas,
            "target_cpu": scaling.target_cpu,
            "target_rps": scaling.target_rps,
        },
        "public": public,
    }
    weights_first = (model, *([adapter] if adapter else []), *volumes)
    return errors.spec(AppSpec, volumes=weights_first, params=params)


def _app_image(value: Any) -> str:
    image = shared.check_image(value)
    if not AppImage.objects.filter(image=image, enabled=True).exists():
        listed = ", ".join(AppImage.objects.filter(enabled=True).values_list("image", flat=True))
        raise ValidationError(
            f"{image} is not on this site's list of app images ({listed or 'none'}): apps run "
            "only images a site admin has added (Django admin, App images)."
        )
    if settings.COMPUTE_BACKEND == "local" and image != images.SERVING_IMAGE:
        raise ValidationError(
            "Custom images need the Kubernetes backend (COMPUTE_BACKEND=kubernetes): this "
            f"panel serves apps on its own machine, with the built-in {images.SERVING_IMAGE}."
        )
    return image


def _weights(
    errors: Errors, data: Mapping[str, Any], project: Project
) -> tuple[VolumeSpec | None, VolumeSpec | None]:
    model = errors.check("model", _weight, data.get("model"), APP_MODEL_PATH, project, True)
    adapter = errors.check(
        "adapter", _weight, data.get("adapter"), APP_ADAPTER_PATH, project, False
    )
    return model, adapter


def _weight(value: Any, path: str, project: Project, required: bool) -> VolumeSpec | None:
    """A bucket path (`bucket@ALIAS/prefix`) as the read-only volume that pulls it."""
    if value in (None, ""):
        if required:
            raise ValidationError(f"Give the model's folder in a bucket, {BUCKET_PATH}.")
        return None
    if not isinstance(value, str) or ":" in value:
        raise ValidationError(f"Give a bucket path, {BUCKET_PATH} (no mount path).")
    try:
        spec = parse_volume_spec(f"{value.strip().rstrip('/')}:{path}:ro")
    except VolumeSpecError as exc:
        raise ValidationError(f"{value!r}: {exc.message}") from None
    shared.check_access(project, spec)
    return spec


def _bucket_path(spec: VolumeSpec | None) -> str:
    assert spec is not None
    return render_volume_spec(spec).rsplit(":", 2)[0]


def _model_name(value: Any, name: str | None) -> str:
    if value:
        if not isinstance(value, str) or not MODEL_NAME_RE.match(value):
            raise ValidationError("Use letters, digits and . _ / - (at most 100).")
        return value
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name or "").strip("-._")
    return slug[:100] or "model"


def _probe_path(value: Any) -> str:
    if not isinstance(value, str) or not PROBE_PATH_RE.match(value):
        raise ValidationError("A path like /health (letters, digits, . _ ~ / -).")
    return value


def _port(value: Any) -> int:
    port = whole_number(value, "The port")
    if not 1024 <= port <= 65535:
        raise ValidationError("A port from 1024 to 65535.")
    return port


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "1", "on", "yes"):
        return True
    if str(value).lower() in ("false", "0", "off", "no", ""):
        return False
    raise ValidationError("true or false.")


def _bounded(errors: Errors, key: str, value: Any, low: int, high: int) -> int | None:
    number = errors.check(key, whole_number, value, "This")
    if number is not None and not low <= number <= high:
        errors.add(key, f"From {low} to {high}.")
        return None
    return number


def _scaling(errors: Errors, data: Mapping[str, Any]) -> Scaling:
    mode = data.get("scaling") or "fixed"
    if mode not in SCALING_MODES:
        errors.add("scaling", "Choose fixed, cpu or rps.")
        return Scaling()
    if mode == "fixed":
        count = _bounded(errors, "replicas", data.get("replicas") or 1, 1, MAX_REPLICAS) or 1
        return Scaling(min_replicas=count, max_replicas=count)
    low = _bounded(errors, "min_replicas", data.get("min_replicas", 1), 0, MAX_REPLICAS)
    high = _bounded(errors, "max_replicas", data.get("max_replicas", 1), 1, MAX_REPLICAS)
    if low is not None and high is not None and low > high:
        errors.add("max_replicas", f"At least min_replicas ({low}).")
    if low == 0 and mode == "cpu" and not settings.APP_KEDA:
        errors.add("min_replicas", "Scaling to zero needs KEDA and a requests-per-second target.")
    kubernetes = settings.COMPUTE_BACKEND == "kubernetes"
    if low == 0 and mode == "rps" and kubernetes and not settings.APP_KEDA:
        errors.add("min_replicas", "Scaling to zero needs KEDA on the cluster (APP_KEDA).")
    key = "target_cpu" if mode == "cpu" else "target_rps"
    target = _bounded(errors, key, data.get(key), 1, 100 if mode == "cpu" else 10_000)
    return Scaling(
        min_replicas=low if low is not None else 1,
        max_replicas=high or 1,
        target_cpu=target if mode == "cpu" else None,
        target_rps=target if mode == "rps" else None,
    )
