"""The `finetune` preset: a job's `params` become the options of `python -m training.finetune`.

Parameters are validated by the fine-tune image's own option parser (standard library only),
so the panel accepts exactly what the entry point accepts, with its messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError

from storage.volumes import Mode, VolumeSpec
from training.options import OptionsError, parse_options

MODEL_PATH = "/workspace/model"
DATA_PATH = "/workspace/data"
OUTPUT_PATH = "/workspace/output"
ENTRY_POINT = ["python", "-m", "training.finetune"]

# The parameters the form shows, with their defaults: the entry point's own, read from its
# parser, so the form starts where `ajuste job run --preset finetune` (which sends only the
# parameters given) runs, and neither can drift from the image (#32).
MAIN_NAMES = (
    "method",
    "rank",
    "alpha",
    "learning_rate",
    "epochs",
    "max_steps",
    "batch_size",
    "grad_accum",
    "max_length",
)
ENTRY_POINT_DEFAULTS: dict[str, Any] = parse_options(
    ["--model", MODEL_PATH, "--data", DATA_PATH, "--output", OUTPUT_PATH]
).as_dict()
MAIN_PARAMS: dict[str, Any] = {name: ENTRY_POINT_DEFAULTS[name] for name in MAIN_NAMES}
# Every option the preset passes through; `base_model` is the preset's own (a hub id).
BOOLEAN_FLAGS = {"merge": "--merge", "packing": "--no-packing"}
VALUE_PARAMS = {
    "method",
    "rank",
    "alpha",
    "dropout",
    "target_modules",
    "learning_rate",
    "warmup_ratio",
    "warmup_steps",
    "weight_decay",
    "max_grad_norm",
    "epochs",
    "max_steps",
    "batch_size",
    "grad_accum",
    "max_length",
    "gradient_checkpointing",
    "bf16",
    "seed",
    "eval_split",
    "save_steps",
    "save_total_limit",
    "log_steps",
}


def finetune_command(*, params: dict[str, Any]) -> list[str]:
    """The argv of the fine-tune entry point for these (validated) params."""
    model = params.get("base_model") or MODEL_PATH
    argv = [*ENTRY_POINT, "--model", str(model), "--data", DATA_PATH, "--output", OUTPUT_PATH]
    return argv + _option_args(params)


def _option_args(params: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for name, value in sorted(params.items()):
        if name in VALUE_PARAMS:
            args += [f"--{name.replace('_', '-')}", str(value)]
        elif name == "merge" and value:
            args.append("--merge")
        elif name == "packing" and not value:
            args.append("--no-packing")
    return args


def clean_finetune(*, params: Any, volumes: Sequence[VolumeSpec]) -> dict[str, Any]:
    """Check params and volumes for the preset; raise ValidationError under the submission's
    error keys (`params`, `params.rank`, `volumes`; see contract.py)."""
    if not isinstance(params, dict):
        raise ValidationError({"params": "Give the preset's parameters as an object."})
    known = VALUE_PARAMS | set(BOOLEAN_FLAGS) | {"base_model"}
    unknown = sorted(str(name) for name in set(params) - known)
    if unknown:
        help_ = "`python -m training.finetune --help` lists the options"
        raise ValidationError(
            {f"params.{name}": f"Unknown parameter ({help_})." for name in unknown}
        )
    errors: dict[str, str] = {}
    try:
        parse_options(finetune_command(params=params)[3:])
    except OptionsError as exc:
        name = (exc.option or "").removeprefix("--").replace("-", "_")
        errors[f"params.{name}" if name in params else "params"] = str(exc)
    errors |= _preset_volume_problems(params, volumes)
    if errors:
        raise ValidationError(errors)
    return params


def _preset_volume_problems(
    params: dict[str, Any], volumes: Sequence[VolumeSpec]
) -> dict[str, str]:
    mounts = {v.mount_path: v for v in volumes}
    needs = []
    if DATA_PATH not in mounts:
        needs.append(f"mount the dataset at {DATA_PATH}")
    output = mounts.get(OUTPUT_PATH)
    if output is None or output.mode is Mode.RO:
        needs.append(f"mount the output bucket at {OUTPUT_PATH} with :rw")
    errors = {"volumes": "The fine-tune preset needs: " + "; ".join(needs) + "."} if needs else {}
    if (MODEL_PATH in mounts) == bool(params.get("base_model")):
        errors["params.base_model"] = (
            f"The fine-tune preset needs either a model volume at {MODEL_PATH} or "
            "params.base_model (a hub id), not both."
        )
    return errors
