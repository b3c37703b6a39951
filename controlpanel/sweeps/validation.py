"""The one contract of a sweep (the API, the form and the CLI go through `validate_sweep`):
problems raise ValidationError under stable keys (`name`, `space`, `space.<param>`,
`sampler`, `pruner`, `max_trials`, `parallel`, `max_cost`, `seed`, and the job contract's own
keys under `base.`, e.g. `base.volumes.0`).

The base is a fine-tune job spec, checked as job_submit would check each trial: once with
every value of the space in turn (each end of a range), so a trial never fails to submit for
a value the sweep accepted."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError

from controlpanel.jobs.presets import DATA_PATH, OUTPUT_PATH, VALUE_PARAMS
from controlpanel.jobs.validation import validate_job
from controlpanel.projects.models import Project
from storage.volumes import Mode, VolumeSpecError, parse_volume_spec, render_volume_spec

SAMPLERS = ("grid", "random", "tpe")
PRUNERS = {"": "", "none": "", "median": "median", "halving": "halving"}
PRUNERS["successive_halving"] = "halving"
# What a space may vary: the preset's numeric options, and `data` (the dataset's folder).
INTEGER_PARAMS = {"rank", "alpha", "max_steps", "max_length", "batch_size", "grad_accum", "seed"}
FLOAT_PARAMS = {"learning_rate", "epochs", "dropout", "warmup_ratio", "weight_decay"}
DATA_PARAM = "data"
SPACE_PARAMS = INTEGER_PARAMS | FLOAT_PARAMS | {DATA_PARAM}
MAX_TRIALS, MAX_PARALLEL, MAX_VALUES = 100, 16, 20


@dataclass(frozen=True)
class SweepSpec:
    """A checked sweep, as the model stores it."""

    name: str
    base: dict[str, Any]
    space: dict[str, dict[str, Any]]
    sampler: str
    pruner: str
    max_trials: int
    parallel: int
    max_cost: Decimal | None
    seed: int


def validate_sweep(*, project: Project, data: Mapping[str, Any]) -> SweepSpec:
    """The checked sweep, or ValidationError with every problem under its key."""
    errors: dict[str, str] = {}
    name = str(data.get("name") or "").strip()
    if not name or len(name) > 80:
        errors["name"] = "Give the sweep a name (at most 80 characters)."
    sampler = str(data.get("sampler") or "tpe").lower()
    if sampler not in SAMPLERS:
        errors["sampler"] = f"One of {', '.join(SAMPLERS)}."
    pruner = PRUNERS.get(str(data.get("pruner") or "").lower())
    if pruner is None:
        errors["pruner"] = "median, successive_halving, or none."
    space = _space(data.get("space"), errors)
    max_trials = _count(data, "max_trials", MAX_TRIALS, errors)
    parallel = _count(data, "parallel", MAX_PARALLEL, errors, default=1)
    if sampler == "grid" and space and not errors:
        size = math.prod(len(p["values"]) for p in space.values())
        if any("values" not in p for p in space.values()):
            errors["space"] = "A grid takes lists of values only (no low/high ranges)."
        elif max_trials and max_trials > size:
            errors["max_trials"] = f"The grid has {size} points: at most {size} trials."
    if max_trials and parallel and parallel > max_trials:
        errors["parallel"] = "At most as many trials at once as trials in all."
    max_cost = _money(data.get("max_cost"), errors)
    seed = _seed(data.get("seed"), errors)
    base = _base(project, data.get("base"), space, errors)
    if errors:
        raise ValidationError(errors)
    return SweepSpec(
        name=name,
        base=base,
        space=space,
        sampler=sampler,
        pruner=pruner or "",
        max_trials=max_trials or 0,
        parallel=parallel or 0,
        max_cost=max_cost,
        seed=seed,
    )


def _count(
    data: Mapping[str, Any], key: str, top: int, errors: dict[str, str], default: int | None = None
) -> int | None:
    value = data.get(key, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        errors[key] = f"A whole number from 1 to {top}."
        return None
    return value


def _money(value: Any, errors: dict[str, str]) -> Decimal | None:
    if value in (None, ""):
        return None
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        amount = Decimal(-1)
    if not amount.is_finite() or amount <= 0 or amount >= Decimal(10) ** 10:
        errors["max_cost"] = "An amount of money above 0, e.g. 25.00."
        return None
    return amount.quantize(Decimal("0.01"))


def _seed(value: Any, errors: dict[str, str]) -> int:
    if value in (None, ""):
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        errors["seed"] = "A whole number from 0 to 2147483647."
        return 0
    return value


def _space(value: Any, errors: dict[str, str]) -> dict[str, dict[str, Any]]:
    if not isinstance(value, dict) or not value:
        errors["space"] = 'Give at least one parameter, e.g. {"learning_rate": {"values": [1e-4]}}.'
        return {}
    space = {}
    for param, spec in value.items():
        checked = _param(str(param), spec)
        if isinstance(checked, str):
            errors[f"space.{param}"] = checked
        else:
            space[str(param)] = checked
    return space


def _param(param: str, spec: Any) -> dict[str, Any] | str:
    """The checked distribution of one parameter, or what is wrong with it."""
    if param not in SPACE_PARAMS:
        return f"Not a parameter a sweep can vary (one of {', '.join(sorted(SPACE_PARAMS))})."
    if not isinstance(spec, dict):
        return 'Give {"values": [...]} or {"low": ..., "high": ..., "log": true|false}.'
    if "values" in spec:
        return _values(param, spec["values"])
    return _range(param, spec)


def _values(param: str, values: Any) -> dict[str, Any] | str:
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_VALUES:
        return f"Give 1 to {MAX_VALUES} values."
    kinds = str if param == DATA_PARAM else (int if param in INTEGER_PARAMS else (int, float))
    if any(isinstance(v, bool) or not isinstance(v, kinds) for v in values):
        return "Each value must be " + ("text" if kinds is str else "a number") + "."
    if param not in (DATA_PARAM,) and any(not math.isfinite(v) for v in values):
        return "Each value must be a finite number."
    if len(set(values)) != len(values):
        return "Each value once."
    return {"values": values}


def _range(param: str, spec: dict[str, Any]) -> dict[str, Any] | str:
    if param == DATA_PARAM:
        return "The dataset takes a list of values."
    low, high, log = spec.get("low"), spec.get("high"), spec.get("log", False)
    number = int if param in INTEGER_PARAMS else (int, float)
    if any(isinstance(v, bool) or not isinstance(v, number) for v in (low, high)):
        return "low and high must be numbers" + (" (whole)" if number is int else "") + "."
    assert isinstance(low, int | float) and isinstance(high, int | float)
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        return "low must be below high."
    if not isinstance(log, bool) or (log and low <= 0):
        return "log is true or false, and a log range starts above 0."
    return {"low": low, "high": high, "log": log}


def corners(space: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One assignment per value of each parameter (each end of a range), the others at their
    first: every value is checked once, not the whole product."""
    firsts = {p: (s["values"][0] if "values" in s else s["low"]) for p, s in space.items()}
    found = [firsts]
    for param, spec in space.items():
        for value in spec["values"][1:] if "values" in spec else [spec["high"]]:
            found.append(firsts | {param: value})
    return found


def trial_spec(base: Mapping[str, Any], params: Mapping[str, Any], number: int) -> dict[str, Any]:
    """The job a trial submits: the base with the trial's parameters, its own output folder
    (`<output prefix>/trial-007`, so trials never resume from each other's checkpoints) and,
    for `data`, its dataset folder."""
    volumes = []
    for text in base.get("volumes") or []:
        spec = parse_volume_spec(text)
        if spec.mount_path == OUTPUT_PATH:
            prefix = "/".join(p for p in (spec.prefix, f"trial-{number:03d}") if p)
            spec = dataclasses.replace(spec, prefix=prefix)
        elif spec.mount_path == DATA_PATH and DATA_PARAM in params:
            spec = parse_volume_spec(f"{params[DATA_PARAM]}:{DATA_PATH}:ro")
        volumes.append(render_volume_spec(spec))
    job_params = dict(base.get("params") or {})
    job_params.update({k: v for k, v in params.items() if k in VALUE_PARAMS})
    return {**base, "params": job_params, "volumes": volumes}


def _base(
    project: Project, base: Any, space: dict[str, dict[str, Any]], errors: dict[str, str]
) -> dict[str, Any]:
    if not isinstance(base, dict):
        errors["base"] = "Give the fine-tune job spec each trial starts from (as POST /jobs/)."
        return {}
    if base.get("preset") != "finetune":
        errors["base.preset"] = "A sweep tries the fine-tune preset (preset: finetune)."
        return {}
    problems = _volume_problems(base.get("volumes"))
    if problems:
        errors.update(problems)
        return {}
    for params in itertools.islice(corners(space), 50) if space else []:
        try:
            validate_job(project=project, data=trial_spec(base, params, 0))
        except ValidationError as exc:
            for key, messages in exc.message_dict.items():
                where = (
                    f"space.{DATA_PARAM}"
                    if key.startswith("volumes") and "data" in params
                    else None
                )
                errors.setdefault(where or f"base.{key}", " ".join(messages))
            break
    return dict(base)


def _volume_problems(volumes: Any) -> dict[str, str]:
    specs = []
    for text in volumes if isinstance(volumes, list) else []:
        try:
            specs.append(parse_volume_spec(str(text)))
        except VolumeSpecError:
            return {}  # the job contract says what is wrong, under base.volumes.N
    output = [s for s in specs if s.mount_path == OUTPUT_PATH]
    if not output or output[0].mode is Mode.RO:
        return {"base.volumes": f"Mount an output folder at {OUTPUT_PATH} with :rw."}
    return {}
