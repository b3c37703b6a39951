"""What every kind's create request is checked with, written once: the shared fields' checks
(flavor, units, volumes, env, labels, name, image), each raising a ValidationError with a
sentence, and `Errors`, which files the problems under the contract's stable keys (contract.py).
Each kind's `validate_<kind>` (its package's validation.py) puts them together with its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ValidationError

from controlpanel.core.validators import validate_visible_name
from controlpanel.engine.contract import (
    MAX_ENV_BYTES,
    MAX_ENV_VALUE_BYTES,
    MAX_ENV_VARS,
    MAX_LABELS,
    MAX_VOLUMES,
    SpecError,
    field_of,
)
from controlpanel.engine.datastores import check_volume_access
from controlpanel.engine.machine_fit import flavor_problem, machine_gpus, units_problem
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import NAME_RULE_FOR_SECRETS, SECRET_NAME_RE, Project
from controlpanel.projects.selectors import secret_names
from storage.volumes import VolumeSpec, VolumeSpecError, check_mount_paths, parse_volume_spec

IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._\-/:@]*$", re.IGNORECASE)
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
RESERVED_ENV_PREFIXES = ("AJUSTE_DATASTORE_", "AWS_")


# An env value `secret:<name>` is the project secret <name>, never the literal text.
SECRET_PREFIX = "secret:"  # noqa: S105 (a prefix)
VOLUME_EXAMPLE = "bucket@ALIAS/prefix:/workspace/data:ro"

Spec = TypeVar("Spec")


class Errors:
    """Problems found so far, by error key, and each checked value by its field (the first
    check of a field keeps it), so `spec` builds the kind's spec from them."""

    def __init__(self) -> None:
        self.by_key: dict[str, list[str]] = {}
        self.values: dict[str, Any] = {}

    def add(self, key: str, message: str) -> None:
        self.by_key.setdefault(key, []).append(message)

    def check(self, key: str, call: Callable[..., Any], *args: Any) -> Any:
        """`call(*args)`, its ValidationError's messages filed under `key` (then None)."""
        try:
            value = call(*args)
        except ValidationError as exc:
            for message in exc.messages:
                self.add(key, message)
            return None
        self.values.setdefault(key, value)
        return value

    def raise_any(self) -> None:
        """SpecError with every problem, if there is one."""
        if self.by_key:
            raise SpecError(self.by_key)

    def spec(self, cls: type[Spec], **given: Any) -> Spec:
        """The dataclass `cls` from the checked values (`given` for the rest), once there is
        no problem (else SpecError)."""
        self.raise_any()
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        kept = {n: self.values[n] for n in names if n in self.values and n not in given}
        return cls(**kept, **given)

    def merge(self, error: ValidationError) -> None:
        for key, messages in error.message_dict.items():
            for message in messages:
                self.add(key, message)

    def has(self, name: str) -> bool:
        """Whether field `name` (or any part of it) has a problem."""
        return any(field_of(key) == name for key in self.by_key)


def size_of(texts: Sequence[str]) -> int:
    """Bytes of these strings as a process gets them (UTF-8, one NUL each)."""
    return sum(len(t.encode("utf-8", "surrogatepass")) + 1 for t in texts)


def too_big(what: str, size: int, limit: int) -> str:
    return f"{what} is {size:,} bytes; the limit is {limit:,} ({limit // 1024} KiB)."


def check_flavor(name: Any) -> Flavor:
    """The enabled flavor of that name, refused when it can never run where this panel runs
    workloads (a GPU flavor on a machine without its GPU: machine_fit.py)."""
    flavor = _known_flavor(name)
    problem = flavor_problem(flavor, machine_gpus())
    if problem:
        raise ValidationError(problem)
    return flavor


def _known_flavor(name: Any) -> Flavor:
    if isinstance(name, Flavor) and name.enabled:  # a form's choice, already looked up
        return name
    if not name or not isinstance(name, str):
        raise ValidationError("Choose a flavor.")
    # PostgreSQL refuses NUL in text: such a name is no flavor's.
    flavor = None if "\x00" in name else Flavor.objects.filter(name=name, enabled=True).first()
    if flavor is None:
        raise ValidationError(f"Unknown flavor {name!r}; `ajuste flavor list` shows them.")
    return flavor


def check_gpu(value: Any, flavor: Flavor | None, project: Project) -> int:
    units = whole_number(value, "The GPU count")
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
    problem = units_problem(flavor, units, machine_gpus())
    if problem:
        raise ValidationError(problem)
    return units


def whole_number(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValidationError(f"{what} must be a whole number.")
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        raise ValidationError(f"{what} must be a whole number, not {value!r}.") from None


def check_volumes(errors: Errors, raw: Any, project: Project) -> list[VolumeSpec]:
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
        if errors.check(key, check_access, project, spec):
            specs.append(spec)
    errors.values["volumes"] = tuple(specs)
    return specs


def check_access(project: Project, spec: VolumeSpec) -> bool:
    check_volume_access(project=project, spec=spec)
    return True


def check_name(value: Any, image: Any) -> str:
    name = (value or "").strip() if isinstance(value, str) or value is None else None
    if name is None:
        raise ValidationError("The name must be text.")
    if not name:
        name = str(image or "job").rsplit("/", 1)[-1].split(":")[0][:100] or "job"
    if len(name) > 100:
        raise ValidationError("Use at most 100 characters.")
    validate_visible_name(name)
    return name


def check_image(value: Any) -> str:
    if not value or not isinstance(value, str):
        raise ValidationError("Give a container image, e.g. my-registry/my-image:latest.")
    value = value.strip()
    if len(value) > 300 or not IMAGE_RE.match(value):
        raise ValidationError(
            f"{value!r} is not a valid image reference (no spaces; letters, digits, . _ - / : @)."
        )
    return value


def check_env(errors: Errors, value: Any, project: Project) -> dict[str, str]:
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
    size = size_of(texts) - len(texts)
    if size > MAX_ENV_BYTES:
        errors.add("env", too_big("The environment (names and values)", size, MAX_ENV_BYTES))
    errors.values["env"] = dict(value)
    return errors.values["env"]


def _env_problem(key: Any, val: Any) -> str | None:
    if not isinstance(key, str) or not ENV_KEY_RE.match(key):
        return f"{key!r} is not a valid variable name (letters, digits, _)."
    if key.startswith(RESERVED_ENV_PREFIXES):
        return f"{key} is reserved: credentials reach jobs only through volumes."
    if not isinstance(val, str) or "\x00" in val:
        return f"The value of {key} must be text (no NUL)."
    size = size_of([val]) - 1
    if size > MAX_ENV_VALUE_BYTES:
        return too_big(f"The value of {key}", size, MAX_ENV_VALUE_BYTES)
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


def check_labels(errors: Errors, value: Any) -> dict[str, str]:
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
    errors.values["labels"] = dict(value)
    return errors.values["labels"]


def _label_text(text: Any) -> bool:
    return isinstance(text, str) and LABEL_RE.fullmatch(text) is not None
