"""Optuna, asked and told: the study of a sweep rebuilt in memory from its trials' rows, a new
trial's parameters asked of its sampler, and whether a running trial should stop, asked of its
pruner. Nothing is kept in Optuna's storage (models.py says why)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState as OptunaState
from optuna.trial import create_trial

from controlpanel.sweeps.models import Sweep, TrialState
from controlpanel.sweeps.validation import INTEGER_PARAMS

optuna.logging.set_verbosity(optuna.logging.WARNING)

# A median rule needs finished trials to compare with; these are started before it prunes.
STARTUP_TRIALS = 2
RULES = {"median": "the median rule", "halving": "successive halving"}
_STATES = {
    TrialState.RUNNING: OptunaState.RUNNING,
    TrialState.COMPLETE: OptunaState.COMPLETE,
    TrialState.PRUNED: OptunaState.PRUNED,
    TrialState.FAILED: OptunaState.FAIL,
}


@dataclass(frozen=True)
class Point:
    """What the study knows of one trial: its parameters, outcome and loss by step."""

    number: int
    params: dict[str, Any]
    state: str
    intermediate: dict[int, float]
    value: float | None = None
    attrs: Mapping[str, Any] | None = None


def distributions(space: Mapping[str, Mapping[str, Any]]) -> dict[str, BaseDistribution]:
    found: dict[str, BaseDistribution] = {}
    for param, spec in space.items():
        if "values" in spec:
            found[param] = CategoricalDistribution(list(spec["values"]))
        elif param in INTEGER_PARAMS:
            found[param] = IntDistribution(int(spec["low"]), int(spec["high"]), log=spec["log"])
        else:
            found[param] = FloatDistribution(
                float(spec["low"]), float(spec["high"]), log=spec["log"]
            )
    return found


def _sampler(sweep: Sweep, asked: int) -> optuna.samplers.BaseSampler:
    """A grid keeps one seed (it orders its points by it); the others take a seed per trial,
    or a study rebuilt for each ask would draw the same point every time."""
    if sweep.sampler == "grid":
        grid = {p: list(s["values"]) for p, s in sweep.space.items()}
        return optuna.samplers.GridSampler(grid, seed=sweep.seed)
    seed = sweep.seed * 1000 + asked
    if sweep.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = max(STARTUP_TRIALS, min(10, sweep.max_trials // 3))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def _pruner(sweep: Sweep) -> optuna.pruners.BasePruner:
    if sweep.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=STARTUP_TRIALS, n_warmup_steps=0)
    if sweep.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def study_of(sweep: Sweep, points: Iterable[Point]) -> optuna.Study:
    """An in-memory study holding these trials, in their numbers' order."""
    points = sorted(points, key=lambda p: p.number)
    study = optuna.create_study(
        direction="minimize", sampler=_sampler(sweep, len(points)), pruner=_pruner(sweep)
    )
    dists = distributions(sweep.space)
    for point in points:
        state = _STATES[TrialState(point.state)]
        value = point.value if state is OptunaState.COMPLETE else None
        if state is OptunaState.COMPLETE and value is None:
            state = OptunaState.FAIL  # finished without a loss: nothing to learn from it
        study.add_trial(
            create_trial(
                params=dict(point.params),
                distributions=dists,
                state=state,
                value=value,
                intermediate_values=dict(point.intermediate),
                system_attrs=dict(point.attrs or {}),
            )
        )
    return study


def ask(sweep: Sweep, points: Iterable[Point]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The next trial's parameters and the sampler's notes on it (a grid's point id)."""
    study = study_of(sweep, points)
    trial = study.ask(distributions(sweep.space))
    frozen = study.trials[-1]
    return dict(trial.params), dict(frozen.system_attrs)


def prune_step(sweep: Sweep, points: Iterable[Point], number: int) -> int | None:
    """The step at which the pruner stops the running trial `number`, or None to go on."""
    points = list(points)
    if not sweep.pruner:
        return None
    study = study_of(sweep, points)
    index = sorted(p.number for p in points).index(number)
    frozen = study.trials[index]
    if frozen.last_step is None or not study.pruner.prune(study, frozen):
        return None
    return int(frozen.last_step)


def prune_reason(sweep: Sweep, step: int) -> str:
    return f"pruned by {RULES.get(sweep.pruner, sweep.pruner)} at step {step}"
