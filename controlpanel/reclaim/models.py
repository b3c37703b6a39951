"""What the idle policy saw and said (a watch per GPU workload, a notice per warning or act),
and the idle GPU-minutes priced from the ledger, by run and UTC hour, with the GPUs no pod
held (the dashboards read these rows; only the tasks write them)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from controlpanel.engine.models import JobRun, Workload
from controlpanel.projects.models import Project


class GpuIdleWatch(models.Model):
    """What the last check saw of one running workload's GPUs (its current run): the latest
    sample, since when its GPUs sit below the project's threshold (None: busy, or no data),
    when its owner was warned and what the policy did; the recent samples for its page's
    chart (`points`: [epoch seconds, busiest GPU %])."""

    workload = models.OneToOneField(
        Workload, on_delete=models.CASCADE, primary_key=True, related_name="gpu_idle_watch"
    )
    run = models.PositiveIntegerField()
    checked_at = models.DateTimeField(default=timezone.now)
    last_sample_at = models.DateTimeField(null=True, blank=True)
    busiest = models.FloatField(null=True, blank=True)
    idle_since = models.DateTimeField(null=True, blank=True)
    problem = models.CharField(max_length=300, blank=True)
    warned_at = models.DateTimeField(null=True, blank=True)
    act_at = models.DateTimeField(null=True, blank=True, help_text="When the policy acts.")
    acted_at = models.DateTimeField(null=True, blank=True)
    action = models.CharField(max_length=40, blank=True)
    points = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"{self.workload_id} run {self.run}: idle since {self.idle_since}"


class NoticeEvent(models.TextChoices):
    WARNING = "warning", "Warning"
    ACTED = "acted", "Acted"


class GpuIdleNotice(models.Model):
    """One notice to a workload's owner (an e-mail, and the project's webhook when it has
    one): the warning that its GPUs sit idle, or what the policy did. `notified_at` once the
    notifier handed it over (a lost message is sent again)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    workload = models.ForeignKey(Workload, on_delete=models.SET_NULL, null=True, related_name="+")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    event = models.CharField(max_length=10, choices=NoticeEvent.choices)
    text = models.TextField()
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["notified_at", "created_at"])]

    def __str__(self) -> str:
        return f"{self.event}: {self.text[:60]}"


class IdleCost(models.Model):
    """One run's GPU-minutes below its project's threshold within one UTC hour, and their
    price: each minute's share of idle GPUs × the ledger's price for that minute × units."""

    run = models.ForeignKey(JobRun, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    owner_name = models.CharField(max_length=150, blank=True)
    workload_name = models.CharField(max_length=200, blank=True)
    hour = models.DateTimeField()
    threshold = models.PositiveSmallIntegerField()
    gpu_minutes = models.DecimalField(max_digits=14, decimal_places=4)
    cost = models.DecimalField(max_digits=16, decimal_places=6)
    currency = models.CharField(max_length=3)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "hour"], name="one_idle_cost_per_run_hour")
        ]
        indexes = [models.Index(fields=["project", "hour"]), models.Index(fields=["hour"])]

    def __str__(self) -> str:
        return f"{self.run_id} {self.hour:%Y-%m-%d %H}h: {self.cost}"


class UnheldGpus(models.Model):
    """GPU-minutes of one GPU model that no pod held within one UTC hour (DCGM's GPUs without
    a pod): the cluster's unallocated capacity, for site admins."""

    hour = models.DateTimeField()
    gpu_model = models.CharField(max_length=100)
    gpu_minutes = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["hour", "gpu_model"], name="one_unheld_per_hour_model")
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.gpu_model}: {self.gpu_minutes}"


class IdleHour(models.Model):
    """An hour whose idle money was priced: `complete` once it ended with Prometheus
    answering (an incomplete one is priced again)."""

    hour = models.DateTimeField(unique=True)
    priced_at = models.DateTimeField(default=timezone.now)
    complete = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h ({'complete' if self.complete else 'partial'})"
