"""The submission contract every kind's create request follows, written once: how a field is
declared (`Field`: the API's request serializer, and so the OpenAPI schema, is built from each
kind's tuple of them), the fields every kind shares (`SHARED`), the limits, and how problems are
reported (`SpecError`, under stable keys); the forms place each keyed error on its widget.
A job's fields are jobs/contract.py's `FIELDS`.

Error keys are the field name (`command`, `env`), or a dotted path to one part of it:
`volumes.0` (the first volume, counted from 0), `command.2`, `env.HF_TOKEN`, `labels.team`,
`params.rank`.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ValidationError

from storage.volumes import SYNTAX

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
    # text | integer | boolean | texts (array of strings) | pairs (object of strings) | object
    kind: str
    help: str
    required: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None


# The fields every kind's request has, as a job's contract first declared them.
SHARED: dict[str, Field] = {
    spec.name: spec
    for spec in (
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
    )
}


def name_field(default: str) -> Field:
    """A kind's `name` field, which defaults to `default`."""
    return Field("name", "text", f"Defaults to `{default}`.", maximum=100)


def image_field(help: str, maximum: int) -> Field:
    """A kind's `image` field: what it names, in `help`."""
    return Field("image", "text", help, maximum=maximum)


class SpecError(ValidationError):
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
