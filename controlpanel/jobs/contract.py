"""A job submission's contract: its fields (the API's request serializer, and so the OpenAPI
schema, is built from `FIELDS`), and what a valid submission becomes (`JobSpec`).
`validation.validate_job` checks a submission against it; errors go under the keys of
engine/contract.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlpanel.engine.contract import MAX_ARGS, MAX_COMMAND_BYTES, MAX_TIMEOUT_S, SHARED, Field
from controlpanel.engine.models import DEFAULT_TIMEOUT_S, Preset
from controlpanel.flavors.models import Flavor
from storage.volumes import VolumeSpec

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
    *(SHARED[name] for name in ("flavor", "gpu")),
    Field(
        "nodes",
        "integer",
        "Pods of `gpu` units each, started together under torchrun (default 1; at most the "
        "site's MAX_NODES_PER_JOB). More than one needs the Kubernetes backend.",
        minimum=1,
    ),
    Field(
        "preemptible",
        "boolean",
        "With QUEUE_ENGINE=kueue: runs at the preemptible priority, may borrow other projects' "
        "idle GPUs and is preempted when they reclaim them, then resumes from its checkpoint "
        "(default true for the fine-tune preset, else false). The builtin queue neither borrows "
        "nor preempts.",
    ),
    *(SHARED[name] for name in ("volumes", "env", "labels")),
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
    """A valid submission: what jobs.services.job_submit stores."""

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
    nodes: int = 1
    preemptible: bool = False
