"""Apps: a model served behind an OpenAI-compatible URL. What a request to create one must say
(`validate_app`, errors under stable keys like a job's), the writes on it (create, start, stop,
delete) and its reads. Each write stores the desired state and enqueues work after commit; the
workload engine (admission, reconcile, observation, logs, runs) does the rest, as for notebooks.

An app's life: QUEUED (waiting for admission) → INITIALIZING (weights pulled, server loading) →
RUNNING (SCALING while its replicas move toward what is wanted) → STOPPING → STOPPED, and again
from QUEUED on the next start, at the same URL. DELETING removes its objects, then its row.

What it serves and how it scales are kept in `params` (`AppConfig` reads them); the weights are
the first of its `volumes` (read-only, at deploy.types.APP_MODEL_PATH and APP_ADAPTER_PATH), so
every check that a volume is still the project's covers them too.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404
from django.urls import reverse

from controlpanel.engine import contract
from controlpanel.engine.contract import JobSpecError
from controlpanel.engine.models import App, AppState
from controlpanel.engine.validation import (
    _access,
    _env,
    _Errors,
    _flavor,
    _gpu,
    _image,
    _integer,
    _labels,
    _name,
    _volumes,
)
from controlpanel.engine.writes import (
    workload_create,
    workload_delete,
    workload_start,
    workload_stop,
)
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project
from deploy import images
from deploy.types import APP_ADAPTER_PATH, APP_MODEL_PATH, Scaling
from storage.volumes import Mode, VolumeSpec, VolumeSpecError, parse_volume_spec, render_volume_spec

A = AppState
MAX_REPLICAS = 10
WEIGHT_PATHS = (APP_MODEL_PATH, APP_ADAPTER_PATH)
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
PROBE_PATH_RE = re.compile(r"^/[A-Za-z0-9._~/-]{0,199}$")
SCALING_MODES = ("fixed", "cpu", "rps")
_JOB_FIELDS = {spec.name: spec for spec in contract.FIELDS}
BUCKET_PATH = "<bucket>@<ALIAS>[/<prefix>]"
FIELDS: tuple[contract.Field, ...] = (
    contract.Field("name", "text", "Defaults to `app`.", maximum=100),
    contract.Field(
        "image",
        "text",
        "The server's image (default: Ajuste's serving image, vLLM with LoRA adapters).",
        maximum=300,
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
    *(_JOB_FIELDS[name] for name in ("flavor", "gpu")),
    contract.Field(
        "volumes", "texts", "More read-only volume specs (`:ro`).", maximum=contract.MAX_VOLUMES
    ),
    *(_JOB_FIELDS[name] for name in ("env", "labels")),
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
STARTABLE = frozenset({A.STOPPED, A.FAILED, A.ERROR})
STOPPABLE = frozenset({A.QUEUED, A.INITIALIZING, A.SCALING, A.RUNNING})
# States in which an app's server may answer (the proxy and the forward-auth let calls in).
SERVING = frozenset({A.RUNNING, A.SCALING})


@dataclass(frozen=True)
class AppConfig:
    """What an app serves and how, as stored in its `params`."""

    model: str
    adapter: str
    model_name: str
    probe_path: str
    port: int
    scaling: Scaling
    public: bool

    @classmethod
    def of(cls, app: Any) -> AppConfig:
        p = app.params
        s = p.get("scaling") or {}
        return cls(
            model=str(p.get("model", "")),
            adapter=str(p.get("adapter", "")),
            model_name=str(p.get("model_name", "")),
            probe_path=str(p.get("probe_path", "/health")),
            port=int(p.get("port", 8000)),
            scaling=Scaling(
                min_replicas=int(s.get("min_replicas", 1)),
                max_replicas=int(s.get("max_replicas", 1)),
                target_cpu=s.get("target_cpu"),
                target_rps=s.get("target_rps"),
            ),
            public=bool(p.get("public", False)),
        )

    @property
    def scaling_mode(self) -> str:
        if self.scaling.target_cpu is not None:
            return "cpu"
        return "rps" if self.scaling.target_rps is not None else "fixed"


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
    errors = _Errors()
    name = errors.check("name", _name, data.get("name"), "app")
    image = errors.check("image", _app_image, data.get("image") or images.SERVING_IMAGE)
    flavor = errors.check("flavor", _flavor, data.get("flavor"))
    gpu = errors.check("gpu", _gpu, data.get("gpu", 1), flavor, project)
    weights = _weights(errors, data, project)
    volumes = _volumes(errors, data.get("volumes") or [], project)
    for index, spec in enumerate(volumes):
        if spec.mode != Mode.RO:
            errors.add(f"volumes.{index}", "An app's volumes are read-only (:ro).")
        if any(spec.mount_path.startswith(path) for path in WEIGHT_PATHS):
            errors.add(f"volumes.{index}", f"{spec.mount_path} is where the weights go.")
    env = _env(errors, data.get("env") or {}, project)
    labels = _labels(errors, data.get("labels") or {})
    model_name = errors.check("model_name", _model_name, data.get("model_name"), name)
    probe = errors.check("probe_path", _probe_path, data.get("probe_path") or "/health")
    port = errors.check("port", _port, data.get("port") or 8000)
    scaling = _scaling(errors, data)
    public = errors.check("public", _boolean, data.get("public", False))
    if errors.by_key:
        raise JobSpecError(errors.by_key)
    model, adapter = weights
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
    return AppSpec(
        name=name,
        image=image,
        flavor=flavor,
        gpu=gpu,
        volumes=(model, *([adapter] if adapter else []), *volumes),
        env=env,
        labels=labels,
        params=params,
    )


def _app_image(value: Any) -> str:
    image = _image(value)
    if settings.COMPUTE_BACKEND == "local" and image != images.SERVING_IMAGE:
        raise ValidationError(
            "Custom images need the Kubernetes backend (COMPUTE_BACKEND=kubernetes): this "
            f"panel serves apps on its own machine, with the built-in {images.SERVING_IMAGE}."
        )
    return image


def _weights(
    errors: _Errors, data: Mapping[str, Any], project: Project
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
    _access(project, spec)
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
    port = _integer(value, "The port")
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


def _bounded(errors: _Errors, key: str, value: Any, low: int, high: int) -> int | None:
    number = errors.check(key, _integer, value, "This")
    if number is not None and not low <= number <= high:
        errors.add(key, f"From {low} to {high}.")
        return None
    return number


def _scaling(errors: _Errors, data: Mapping[str, Any]) -> Scaling:
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


@transaction.atomic
def app_create(*, access: ProjectAccess, user: Any, data: Mapping[str, Any]) -> App:
    """Validate and store an app, then start it through the project's quota."""
    spec = validate_app(project=access.project, data=data)
    app = App(
        project=access.project,
        owner=user,
        name=spec.name,
        image=spec.image,
        flavor=spec.flavor,
        gpu=spec.gpu,
        volumes=[render_volume_spec(v) for v in spec.volumes],
        env=spec.env,
        labels=spec.labels,
        params=spec.params,
    )
    return workload_create(access=access, user=user, workload=app, reason="created")


def app_start(*, access: ProjectAccess, user: Any, app: App) -> App:
    """Start a stopped app again: a new run (billed apart), the same URL."""
    return workload_start(access=access, user=user, workload=app)


def app_stop(*, access: ProjectAccess | None, user: Any, app: App, reason: str = "") -> App:
    """Stop an app: its replicas go, its URL stays (it answers 503 until started again).
    `reason`: why, when the panel stops it (a budget reached), instead of who asked."""
    return workload_stop(access=access, user=user, workload=app, reason=reason)


def app_delete(*, access: ProjectAccess, user: Any, app: App) -> None:
    """Delete an app: its objects, then its row. Its runs stay, for billing."""
    workload_delete(access=access, user=user, workload=app)


def apps_for_project(*, project: Project) -> QuerySet[App]:
    return (
        App.objects.filter(project=project)
        .select_related("project", "owner", "flavor")
        .prefetch_related("flavor__prices", "runs__flavor__prices")
        .defer("progress", "loss_curve", "log_cursor")
        .order_by("-created_at")
    )


def app_get(*, project: Project, app_id: Any) -> App:
    """An app of this project, or 404 (also for malformed ids and other projects' ones)."""
    try:
        key = uuid.UUID(str(app_id))
    except ValueError:
        raise Http404("No such app.") from None
    app = apps_for_project(project=project).filter(pk=key).first()
    if app is None:
        raise Http404("No such app.")
    return app


def app_path(app: Any) -> str:
    """Where the app is served (on APP_HOST on a cluster, on the panel locally): stable."""
    return f"/a/{app.project.slug}/{app.id}/"


def app_url(app: Any) -> str:
    """The OpenAI base URL of the app (what `openai.OpenAI(base_url=...)` takes)."""
    if settings.COMPUTE_BACKEND == "kubernetes":
        return f"https://{settings.APP_HOST}{app_path(app)}v1"
    return f"{settings.SITE_URL}{reverse('app-proxy', args=[app.project.slug, app.id, 'v1'])}"


def user_volumes(app: Any) -> list[str]:
    """The volumes the user added (the weights' are shown as `model` and `adapter`)."""
    return [v for v in app.volumes if v.rsplit(":", 2)[1] not in WEIGHT_PATHS]


def replicas(app: Any) -> tuple[int, int]:
    """(ready, wanted) as last observed."""
    ready, wanted = (app.progress or {}).get("replicas") or (0, 0)
    return int(ready), int(wanted)
