"""Writes on sweeps: create, stop, and advance (the driver's one step, tasks.sweep_advance).

A trial is an ordinary job, submitted and stopped through the jobs kind's services (quota,
billing, logs, its page); its intermediate values are the loss points its progress events
left on the job (training/protocol.py, stored by the engine's collector)."""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel import audit
from controlpanel.jobs.models import Job
from controlpanel.jobs.services import job_stop, job_submit
from controlpanel.jobs.states import JobState
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Membership
from controlpanel.sweeps import selectors, study
from controlpanel.sweeps.models import Sweep, SweepState, Trial, TrialState
from controlpanel.sweeps.validation import trial_spec, validate_sweep

SWEEP_LABEL = "sweep"


@transaction.atomic
def sweep_create(*, access: ProjectAccess, user: Any, data: Any) -> Sweep:
    """Validate and store a sweep; the driver launches its first trials once committed."""
    from controlpanel.sweeps import tasks

    spec = validate_sweep(project=access.project, data=data if isinstance(data, dict) else {})
    sweep = Sweep.objects.create(project=access.project, owner=user, **vars(spec))
    audit.record("sweep.create", actor=user, project=access.project, target=sweep, name=spec.name)
    tasks.sweep_advance.delay_on_commit(str(sweep.pk))
    return sweep


def sweep_stop(*, access: ProjectAccess, user: Any, sweep: Sweep) -> Sweep:
    """Stop launching and stop the running trials (their jobs end INTERRUPTED, billed as run)."""
    if not (access.can_manage or sweep.owner_id == user.pk):
        raise PermissionDenied("Only the sweep's owner or a project manager can stop it.")
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().get(pk=sweep.pk)
        if sweep.state != SweepState.RUNNING:
            raise ValidationError(f"The sweep already ended ({sweep.state}).")
        _end(sweep, SweepState.STOPPED, f"stopped by {user.username}")
        audit.record("sweep.stop", actor=user, project=sweep.project, target=sweep)
    for trial in sweep.trials.filter(state=TrialState.RUNNING).select_related("job"):
        _stop_trial(sweep, trial, TrialState.FAILED, f"stopped with the sweep by {user.username}")
    return sweep


def _end(sweep: Sweep, state: str, reason: str) -> None:
    sweep.state, sweep.state_reason, sweep.finished_at = state, reason[:500], timezone.now()
    sweep.save(update_fields=["state", "state_reason", "finished_at"])


def _owner_access(sweep: Sweep) -> ProjectAccess | None:
    """The owner's access to the sweep's project (trials are the owner's jobs); None once the
    owner left it."""
    role = (
        Membership.objects.filter(project=sweep.project, user=sweep.owner)
        .values_list("role", flat=True)
        .first()
    )
    if role is None and not sweep.owner.is_staff:
        return None
    return ProjectAccess(project=sweep.project, role=role, is_admin=sweep.owner.is_staff)


def _stop_trial(
    sweep: Sweep, trial: Trial, state: str, reason: str, step: int | None = None
) -> None:
    """Mark the trial and stop its job with the reason (its loss so far kept)."""
    job = trial.job
    trial.state, trial.reason, trial.pruned_step = state, reason[:500], step
    if job is not None:
        trial.intermediate = selectors.loss_points(job)
    trial.save(update_fields=["state", "reason", "pruned_step", "intermediate"])
    if job is None or job.is_final:
        return
    access = _owner_access(sweep) or ProjectAccess(
        project=sweep.project, role=None, is_admin=True
    )  # the panel acts for an owner who left: the budget still ends the trial
    with contextlib.suppress(ValidationError):  # it ended meanwhile
        job_stop(access=access, user=sweep.owner, job=Job.objects.get(pk=job.pk), reason=reason)


# ---- the driver's step ------------------------------------------------------------------------


def sweep_advance(*, sweep: Sweep) -> None:
    """Follow the trials' jobs, prune, launch up to the budget, end the sweep when all is
    done. Safe to repeat: every decision is read from the rows (the caller holds the claim)."""
    trials = list(sweep.trials.select_related("job").order_by("number"))
    for trial in trials:
        if trial.state == TrialState.RUNNING:
            _follow(trial)
    if sweep.state != SweepState.RUNNING:
        return
    _prune(sweep, trials)
    launched = _launch(sweep, trials)
    if launched is None:
        return  # the sweep failed
    _maybe_finish(sweep, trials + launched)


def _follow(trial: Trial) -> None:
    """A running trial whose job ended: COMPLETE with its final loss, or FAILED with why."""
    job = trial.job
    if job is not None and not job.is_final:
        return
    if job is None:
        trial.state, trial.reason = TrialState.FAILED, "its job was deleted"
    else:
        trial.intermediate = selectors.loss_points(job)
        trial.final_loss = selectors.final_loss(job)
        if job.state == JobState.DONE and trial.final_loss is not None:
            trial.state, trial.reason = TrialState.COMPLETE, ""
        else:
            trial.state = TrialState.FAILED
            trial.reason = f"the job ended {job.state}: {job.state_reason}"[:500]
    trial.save(update_fields=["state", "reason", "intermediate", "final_loss"])


def _prune(sweep: Sweep, trials: list[Trial]) -> None:
    if not sweep.pruner:
        return
    for trial in trials:
        if trial.state != TrialState.RUNNING or trial.job is None:
            continue
        step = study.prune_step(sweep, selectors.points(trials), trial.number)
        if step is not None:
            _stop_trial(sweep, trial, TrialState.PRUNED, study.prune_reason(sweep, step), step)


def _launch(sweep: Sweep, trials: list[Trial]) -> list[Trial] | None:
    """New trials while fewer than `parallel` run, up to `max_trials` and the money; None
    when a trial could not be submitted (the sweep then failed, saying why)."""
    launched: list[Trial] = []
    while _room(sweep, trials + launched):
        access = _owner_access(sweep)
        if access is None:
            _end(sweep, SweepState.FAILED, f"{sweep.owner.username} is no longer a member")
            return None
        number = len(trials) + len(launched)
        params, attrs = study.ask(sweep, selectors.points(trials + launched))
        try:
            launched.append(_submit(sweep, access, number, params, attrs))
        except ValidationError as exc:
            reason = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            _end(sweep, SweepState.FAILED, f"trial {number} could not be submitted: {reason}")
            return None
    return launched


@transaction.atomic
def _submit(
    sweep: Sweep, access: ProjectAccess, number: int, params: dict[str, Any], attrs: dict[str, Any]
) -> Trial:
    """The trial's job and its row, in one transaction (the number is unique per sweep)."""
    data = trial_spec(sweep.base, params, number)
    labels = dict(data.get("labels") or {}) | {SWEEP_LABEL: str(sweep.pk)[:8]}
    data |= {"name": f"{sweep.name} #{number}"[:100], "labels": labels}
    job = job_submit(access=access, user=sweep.owner, data=data)
    return Trial.objects.create(
        sweep=sweep, number=number, job=job, params=params, optuna_attrs=attrs
    )


def _room(sweep: Sweep, trials: list[Trial]) -> bool:
    live = sum(1 for t in trials if t.job is not None and not t.job.is_final)
    return live < sweep.parallel and len(trials) < sweep.max_trials and not _spent(sweep)


def _spent(sweep: Sweep) -> bool:
    return sweep.max_cost is not None and selectors.sweep_cost(sweep=sweep) >= sweep.max_cost


def _maybe_finish(sweep: Sweep, trials: list[Trial]) -> None:
    if any(t.job is not None and not t.job.is_final for t in trials):
        return
    if len(trials) < sweep.max_trials and not _spent(sweep):
        return
    _end(sweep, SweepState.DONE, _summary(sweep, trials))


def _summary(sweep: Sweep, trials: list[Trial]) -> str:
    counts = {state: sum(1 for t in trials if t.state == state) for state in TrialState.values}
    said = ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n)
    text = f"{len(trials)} trial{'s' if len(trials) != 1 else ''}: {said}"
    if len(trials) < sweep.max_trials:
        spent = selectors.sweep_cost(sweep=sweep)
        text += f"; the budget of {sweep.max_cost} was reached ({spent.normalize()})"
    best = selectors.best_trial(trials)
    if best is not None:
        text += f"; best: trial {best.number}, loss {best.final_loss:.4f}"
    return text


def money(value: Decimal | None) -> str | None:
    return None if value is None else str(value)
