"""Rollups the dashboards read: a day of runs and ends per (project, kind, owner, flavor), and
per workload (for "top by cost"). Written only by `rollups.days_rebuild()` (the beat task and
`seed_history`), from JobRun and Workload rows; a day is always rebuilt whole, so running it
twice gives the same rows."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.workloads.models import Workload


class UsageDay(models.Model):
    """One UTC day of one project's usage by kind, owner and flavor: GPU-seconds of RUNNING
    time in the day, billed minutes (each started minute, as billing counts them) × units, and
    Σ minutes × units × price per hour (money is that / 60), runs started, and the workloads
    that ended in the day by final state. Deleted workloads' runs keep counting (kind "",
    owner empty)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    kind = models.CharField(max_length=20, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="+")
    gpu_seconds = models.FloatField(default=0)
    unit_minutes = models.BigIntegerField(default=0)
    price_minutes = models.DecimalField(max_digits=20, decimal_places=4, default=0)
    runs_started = models.IntegerField(default=0)
    ended_done = models.IntegerField(default=0)
    ended_failed = models.IntegerField(default=0)
    ended_error = models.IntegerField(default=0)
    ended_sync_failed = models.IntegerField(default=0)
    ended_interrupted = models.IntegerField(default=0)
    ended_stopped = models.IntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["project", "day"]),
            models.Index(fields=["day"]),
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day} {self.kind} {self.owner_id} {self.flavor_id}"


class WorkloadDay(models.Model):
    """One UTC day of one workload's usage (the table of the costliest workloads)."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    gpu_seconds = models.FloatField(default=0)
    price_minutes = models.DecimalField(max_digits=20, decimal_places=4, default=0)

    class Meta:
        indexes = [
            models.Index(
                fields=["project", "day"],
                include=["workload", "price_minutes", "gpu_seconds"],
                name="dash_wlday_project_day",
            ),
            models.Index(
                fields=["day"],
                include=["workload", "price_minutes", "gpu_seconds"],
                name="dash_wlday_day",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workload_id} {self.day}"


class RollupMark(models.Model):
    """When each day's rollup was last rebuilt (the page says how fresh its numbers are)."""

    day = models.DateField(primary_key=True)
    rebuilt_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.day} at {self.rebuilt_at:%H:%M:%S}"
