"""A sweep and its trials, and the adapters finished fine-tunes wrote.

The state lives in these tables, not in Optuna's own storage: each trial is one of our jobs, and
a study is rebuilt in memory from these rows whenever the sweep advances (study.py), so there is
one source of truth, migrated with the rest, on the panel's one database."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from controlpanel.engine.models import Workload
from controlpanel.projects.models import Project


class SweepState(models.TextChoices):
    RUNNING = "RUNNING"
    DONE = "DONE"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class Sweep(models.Model):
    """A fine-tune spec (`base`, as a job is submitted), a search space over the preset's
    parameters, a sampler, an optional pruner and a budget (trials, trials at once, money);
    its trials are ordinary jobs, its cost the sum of theirs."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sweeps")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="sweeps"
    )
    name = models.CharField(max_length=80)
    base = models.JSONField(help_text="The fine-tune job spec each trial starts from.")
    space = models.JSONField(help_text='{param: {"values": [...]} or {"low", "high", "log"}}')
    sampler = models.CharField(max_length=10)
    pruner = models.CharField(max_length=10, blank=True, default="")
    max_trials = models.PositiveSmallIntegerField()
    parallel = models.PositiveSmallIntegerField()
    max_cost = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    seed = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=10, choices=SweepState.choices, default="RUNNING")
    state_reason = models.CharField(max_length=500, blank=True)
    # The driver's claim (tasks.sweep_advance): one advance at a time, a stale claim expires.
    claimed_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["project", "-created_at"]), models.Index(fields=["state"])]

    def __str__(self) -> str:
        return f"{self.name} ({str(self.id)[:8]})"

    @property
    def is_live(self) -> bool:
        return self.state == SweepState.RUNNING


class TrialState(models.TextChoices):
    """Optuna's names for a trial's outcome."""

    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAILED = "FAILED"


class Trial(models.Model):
    """One point of the search: the parameters Optuna asked for, the job that tries them, and
    its intermediate values (loss by step) once the job has ended, so the study can be rebuilt
    after the job is deleted."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveSmallIntegerField()
    job = models.ForeignKey(
        Workload, on_delete=models.SET_NULL, null=True, related_name="sweep_trials"
    )
    params = models.JSONField()
    optuna_attrs = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=TrialState.choices, default="RUNNING")
    reason = models.CharField(max_length=500, blank=True)
    pruned_step = models.IntegerField(null=True, blank=True)
    final_loss = models.FloatField(null=True, blank=True)
    intermediate = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["sweep", "number"]
        constraints = [
            models.UniqueConstraint(fields=["sweep", "number"], name="one_trial_per_number")
        ]

    def __str__(self) -> str:
        return f"trial {self.number} of {self.sweep_id}"


class Adapter(models.Model):
    """What one finished fine-tune run wrote: where its adapter lies, what it trained from (base
    model, parameters, the lineage of every input volume), its losses and cost. Kept when the
    job is deleted: "which data was this adapter trained on" outlives the job."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="adapters")
    job = models.ForeignKey(Workload, on_delete=models.SET_NULL, null=True, related_name="adapters")
    run = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    base_model = models.CharField(max_length=400)
    params = models.JSONField(default=dict)
    location = models.CharField(max_length=500, help_text="bucket@ALIAS/prefix/adapter")
    final_loss = models.FloatField(null=True, blank=True)
    eval_loss = models.FloatField(null=True, blank=True)
    cost = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True)
    lineage = models.JSONField(default=list, blank=True)
    data_digest = models.CharField(max_length=100, blank=True)
    lineage_problem = models.CharField(max_length=300, blank=True)
    exported_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["job", "run"], name="one_adapter_per_run")]

    def __str__(self) -> str:
        return f"{self.name} run {self.run}"
