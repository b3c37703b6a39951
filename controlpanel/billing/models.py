from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from controlpanel.engine.models import JobRun, Workload
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.projects.models import Project


class PeriodState(models.TextChoices):
    OPEN = "open", "Open"
    CLOSED = "closed", "Closed"
    LOCKED = "locked", "Locked"


class Period(models.Model):
    """A calendar month (UTC) of billing and where it stands. No row: the month is open.

    Open: its lines follow the runs. Closed by an admin once the month is over (after
    reviewing its draft): the invoice is issued, and a correction of its own minutes still
    lands in it. Locked: it never changes again; a correction of its minutes lands in the
    first month after it that is not locked, as an adjustment line."""

    month = models.DateField(unique=True, help_text="The month's first day.")
    state = models.CharField(max_length=10, choices=PeriodState.choices, default=PeriodState.OPEN)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    locked_at = models.DateTimeField(null=True, blank=True)
    locked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-month"]
        constraints = [
            models.CheckConstraint(condition=Q(month__day=1), name="period_is_a_month"),
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} ({self.state})"


class Meter(models.Model):
    """What a run's ledger was last brought up to date from: the run's start and end, and
    how far an open run was billed. A run whose row differs from its meter (or has none) is
    behind: the catch-up task records it (a crash between a run's change and its recording
    loses no minute)."""

    run = models.OneToOneField(JobRun, on_delete=models.CASCADE, primary_key=True)
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    units = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    billed_to = models.DateTimeField(help_text="The end billed: the run's, or 'now' while open.")
    minutes = models.PositiveIntegerField()
    recorded_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.run_id}: {self.minutes} min"


class Line(models.Model):
    """Billed minutes: one line per (run, price version, month the minutes lie in, month they
    are billed in), so 10 million minutes a month are some 10^5 lines, not 10^7 rows.

    A usage line (`period == of_period`) holds the contiguous minutes `first_minute` ..
    `first_minute + minutes - 1` of the run (minute k starts k minutes after `run_start`):
    equivalent to one row per minute, and PostgreSQL refuses two usage lines of one run start
    sharing a minute (an exclusion constraint, migration 0002). An adjustment line
    (`period > of_period`) bills, in a later month, the change of a locked month's minutes:
    a count, negative when the run turned out shorter."""

    run = models.ForeignKey(JobRun, on_delete=models.CASCADE, related_name="billing_lines")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="billing_lines")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    price = models.ForeignKey(
        FlavorPrice,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The price version; empty for minutes before the flavor's first price.",
    )
    price_per_hour = models.DecimalField(max_digits=12, decimal_places=4)
    units = models.PositiveSmallIntegerField()
    currency = models.CharField(max_length=3)
    period = models.DateField(help_text="The month billed in.")
    of_period = models.DateField(help_text="The month the minutes lie in.")
    run_start = models.DateTimeField()
    first_minute = models.IntegerField(null=True, blank=True)
    minutes = models.IntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["period", "run_id", "of_period", "first_minute"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "price", "of_period", "period"],
                condition=Q(price__isnull=False),
                name="one_line_per_run_price_month",
            ),
            models.UniqueConstraint(  # minutes before the flavor's first price
                fields=["run", "of_period", "period"],
                condition=Q(price=None),
                name="one_unpriced_line_per_run_month",
            ),
            models.CheckConstraint(
                condition=(
                    Q(period=F("of_period"), minutes__gt=0, first_minute__gte=0)
                    | Q(period__gt=F("of_period"), first_minute=None)
                ),
                name="usage_or_adjustment",
            ),
        ]
        indexes = [
            # a project's month by run start: the drill-down's runs page reads its rows only
            models.Index(fields=["period", "project", "run_start", "run"]),
            models.Index(fields=["of_period", "run"]),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.of_period:%Y-%m}→{self.period:%Y-%m}: {self.minutes} min"

    @property
    def is_adjustment(self) -> bool:
        return self.period != self.of_period

    @property
    def price_minutes(self) -> int:
        return self.minutes * self.units


class WorkloadMonth(models.Model):
    """The lines of one workload billed in one month, summed per flavor (billing/rollup.py):
    what the admins' drill-down reads instead of every line of the project's month. Kept by
    the writer of the lines in the same transaction (each change of a run's lines adds its
    difference), so it always equals the ledger; `workload` is the run's workload, None once
    that workload is deleted (its rows then join the project's None rows)."""

    period = models.DateField(help_text="The month billed in.")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    # No database constraint: a deleted workload's rows are moved to None by the deletion,
    # in the same transaction (billing/receivers.py), never left pointing nowhere.
    workload = models.ForeignKey(
        Workload,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    minutes = models.BigIntegerField(default=0)
    unit_minutes = models.BigIntegerField(default=0, help_text="Σ minutes × units.")
    price_minutes = models.DecimalField(
        max_digits=24, decimal_places=4, default=0, help_text="Σ minutes × units × price per hour."
    )
    adjustments = models.IntegerField(default=0, help_text="Adjustment lines among them.")
    lines = models.IntegerField(default=0)
    runs = models.IntegerField(default=0, help_text="Runs with lines among them.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["period", "project", "workload", "flavor"],
                condition=Q(workload__isnull=False),
                name="one_workload_month_per_flavor",
            ),
            models.UniqueConstraint(
                fields=["period", "project", "flavor"],
                condition=Q(workload=None),
                name="one_deleted_workloads_month_per_flavor",
            ),
        ]
        indexes = [models.Index(fields=["workload"])]

    def __str__(self) -> str:
        return f"{self.period:%Y-%m} {self.project_id} {self.workload_id}: {self.minutes} min"


class Sighting(models.Model):
    """The last time the cluster showed a run's pod alive (the sweep's listing, a watch
    event), so a run whose pod vanished is closed there rather than when the panel noticed.
    `estimated`: the run was closed that way (its end was never reported by the cluster); the
    pages, the CSV and the usage API say so. Kept apart from the meter, which a rebuild
    recreates: the flag outlives any recomputation of the ledger."""

    run = models.OneToOneField(
        JobRun, on_delete=models.CASCADE, primary_key=True, related_name="sighting"
    )
    seen_at = models.DateTimeField()
    estimated = models.BooleanField(default=False)
    noticed_at = models.DateTimeField(
        null=True, blank=True, help_text="When the panel found the pod gone (estimated runs)."
    )

    def __str__(self) -> str:
        return f"{self.run_id} seen {self.seen_at:%Y-%m-%d %H:%M:%S}"


class BudgetThreshold(models.IntegerChoices):
    HALF = 50, "50 %"
    MOST = 80, "80 %"
    ALL = 100, "100 %"


class BudgetAlert(models.Model):
    """One alert of one project's monthly budget: sent once per (project, month, threshold),
    whatever the number of workers checking at once (the unique constraint decides who
    sends). `notified_at`: handed to the mail server and the webhook queue."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="budget_alerts")
    month = models.DateField(help_text="The month's first day.")
    threshold = models.PositiveSmallIntegerField(choices=BudgetThreshold.choices)
    budget = models.DecimalField(max_digits=12, decimal_places=2)
    spent = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3)
    created_at = models.DateTimeField(default=timezone.now)
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["month", "threshold"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "month", "threshold"], name="one_budget_alert_per_threshold"
            ),
            models.CheckConstraint(condition=Q(month__day=1), name="budget_alert_month"),
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.month:%Y-%m} {self.threshold} %"


class KeptRun(models.Model):
    """Who ran a run and what its workload was called, kept when the workload is deleted
    (billing/receivers.py, in the deletion's transaction): the ledger's pages and the usage
    API still name the person and the workload, forever."""

    run = models.OneToOneField(
        JobRun, on_delete=models.CASCADE, primary_key=True, related_name="kept"
    )
    workload = models.UUIDField(help_text="The deleted workload's id.")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=20)

    def __str__(self) -> str:
        return f"{self.run_id}: {self.kind} {self.name}"
