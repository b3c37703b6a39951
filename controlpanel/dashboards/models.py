"""Rollups the dashboards read: a day of runs and ends per (project, kind, owner, flavor), and
per workload (for "top by cost"), each workload's whole span, and a histogram of queue waits
per day. Written only by `rollups.days_rebuild()` (the beat task and
`seed_history`), from JobRun and Workload rows; a day is always rebuilt whole, so running it
twice gives the same rows."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from controlpanel.engine.models import Workload
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project


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


class WorkloadSpan(models.Model):
    """One workload's days with usage (its first and last day with a WorkloadDay row) and its
    totals over them: "top by cost" reads the spans that lie inside a range by their total,
    and sums the days of the few that straddle its ends. `multi_day` (first < last) keeps the
    straddlers' index small: most workloads run within one day."""

    workload = models.OneToOneField(
        Workload, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    # The workload's, copied: the filters by user and flavor read no workload row.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="+")
    first_day = models.DateField()
    last_day = models.DateField()
    multi_day = models.BooleanField(default=False)
    gpu_seconds = models.FloatField(default=0)
    price_minutes = models.DecimalField(max_digits=20, decimal_places=4, default=0)

    class Meta:
        indexes = [
            models.Index(
                "project",
                models.F("price_minutes").desc(),
                models.F("gpu_seconds").desc(),
                "workload",
                name="dash_span_project_price",
            ),
            models.Index(
                models.F("price_minutes").desc(),
                models.F("gpu_seconds").desc(),
                "workload",
                name="dash_span_price",
            ),
            models.Index(fields=["project", "last_day"], name="dash_span_project_last"),
            models.Index(fields=["last_day"], name="dash_span_last"),
            models.Index(
                fields=["multi_day", "last_day", "first_day"],
                include=["workload", "project"],
                name="dash_span_multi_day",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workload_id} {self.first_day}..{self.last_day}"


class WaitDay(models.Model):
    """How many workloads of a project admitted in one UTC day waited how long in the queue,
    by log bucket (rollups.wait_bucket): bucket 0 under a second, bucket i from GAMMA^(i-1) to
    GAMMA^i seconds. Percentiles read from it are within ±2.5 % of the exact ones."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    bucket = models.SmallIntegerField()
    count = models.IntegerField()

    class Meta:
        indexes = [
            models.Index(
                fields=["project", "day"], include=["bucket", "count"], name="dash_waitday_project"
            ),
            models.Index(fields=["day"], include=["bucket", "count"], name="dash_waitday_day"),
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day} bucket {self.bucket}: {self.count}"


class WaitDayBy(models.Model):
    """WaitDay by owner and flavor too: what a filter by user or flavor sums (about ten times
    WaitDay's rows, still far fewer than the workloads)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="+")
    bucket = models.SmallIntegerField()
    count = models.IntegerField()

    class Meta:
        indexes = [
            models.Index(
                fields=["owner", "day"],
                include=["project", "flavor", "bucket", "count"],
                name="dash_waitby_owner",
            ),
            models.Index(
                fields=["flavor", "day"],
                include=["project", "owner", "bucket", "count"],
                name="dash_waitby_flavor",
            ),
            models.Index(fields=["day"], name="dash_waitby_day"),
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day} {self.owner_id} {self.flavor_id} {self.bucket}"


class RollupMark(models.Model):
    """When each day's rollup was last rebuilt (the page says how fresh its numbers are)."""

    day = models.DateField(primary_key=True)
    rebuilt_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.day} at {self.rebuilt_at:%H:%M:%S}"
