"""The job submission contract, written once: its fields, its limits, what a valid submission
becomes (`JobSpec`) and how problems are reported (`JobSpecError`, under stable keys).

`validation.validate_job` checks a submission against it; the API's request serializer (and so
the OpenAPI schema) is built from `FIELDS`; the forms place each keyed error on their widget.

Error keys are the field name (`command`, `env`), or a dotted path to one part of it:
`volumes.0` (the first volume, counted from 0), `command.2`, `env.HF_TOKEN`, `labels.team`,
`params.rank`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from controlpanel.engine.models import DEFAULT_TIMEOUT_S, Preset
from controlpanel.flavors.models import Flavor
from storage.volumes import SYNTAX, VolumeSpec

# Limits on what a submission may ask for: the rendered Job and pod stay far from the API
# server's object size, and a process's argv + environment far from the kernel's ARG_MAX.
MAX_TIMEOUT_S = 30 * 24 * 3600
MAX_ARGS = 200
MAX_ARG_CHARS = 10_000
MAX_COMMAND_BYTES = 64 * 1024
MAX_ENV_VARS = 100
MAX_ENV_VALUE_BYTES = 32 * 1024
MAX_ENV_BYTES = 64 * 1024  # names and values together: one value at its limit, and more
MAX_LABELS = 32
MAX_VOLUMES = 32


@dataclass(frozen=True)
class Field:
    """One submission field as the API takes it: `kind` is its JSON shape."""

    name: str
    kind: str  # text | integer | texts (array of strings) | pairs (object of strings) | object
    help: str
    required: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None


FIELDS: tuple[Field, ...] = (
    Field("name", "text", "Defaults to the image's name.", maximum=100),
    Field("image", "text", "A container image; the fine-tune preset sets its own.", maximum=300),
    Field(
        "command",
        "texts",
        f"The arguments (never run through a shell); at most {MAX_ARGS}, "
        f"{MAX_COMMAND_BYTES // 1024} KiB in all. The fine-tune preset sets its own.",
        maximum=MAX_ARGS,
    ),
    Field("flavor", "text", "A flavor's name (`GET /api/v1/flavors/`).", required=True),
    Field("gpu", "integer", "Units of the flavor (default 1).", minimum=1),
    Field("volumes", "texts", f"Volume specs: {SYNTAX}.", maximum=MAX_VOLUMES),
    Field(
        "env",
        "pairs",
        f"NAME: value; a value `secret:<name>` is the project's secret of that name. At most "
        f"{MAX_ENV_VARS} variables, {MAX_ENV_VALUE_BYTES // 1024} KiB a value, "
        f"{MAX_ENV_BYTES // 1024} KiB in all.",
    ),
    Field("labels", "pairs", f"key: value, at most {MAX_LABELS}."),
    Field(
        "timeout",
        "integer",
        "Seconds (default 7 days, at most 30).",
        minimum=60,
        maximum=MAX_TIMEOUT_S,
    ),
    Field(
        "preset", "text", "`finetune`, or empty for a custom image.", choices=tuple(Preset.values)
    ),
    Field("params", "object", "The preset's parameters (`--rank 8` is `rank: 8`)."),
)


@dataclass(frozen=True)
class JobSpec:
    """A valid submission: what services.job_submit stores."""

    name: str
    image: str
    command: list[str]
    flavor: Flavor
    gpu: int
    volumes: tuple[VolumeSpec, ...]
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    timeout: int = DEFAULT_TIMEOUT_S
    preset: str = ""
    params: dict[str, Any] = field(default_factory=dict)


class JobSpecError(ValidationError):
    """Every problem of a submission, as `{key: [messages]}` (keys above). A Django
    ValidationError, so pages and the API (`controlpanel.api.errors`) answer it as such."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__({key: list(messages) for key, messages in errors.items()})

    @property
    def by_key(self) -> dict[str, list[str]]:
        return self.message_dict


def field_of(key: str) -> str:
    """The submission field an error key belongs to: `volumes.0` → `volumes`."""
    return key.split(".", 1)[0]


def part_of(key: str) -> str:
    """The part of the field an error key names: `volumes.0` → `0`, `command` → ``."""
    return key.partition(".")[2]
