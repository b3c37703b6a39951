from __future__ import annotations

import functools
import uuid
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.utils import timezone

from controlpanel.engine.registry import kind_of, kinds, states_of
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from storage.volumes import VolumeSpec, parse_volume_spec

DEFAULT_TIMEOUT_S = 7 * 24 * 3600
# The engine's own state, shared by the kinds whose objects outlive their runs (one_name): the
# objects are going, then the row.
DELETING = "DELETING"


# The kinds (controlpanel/kinds.py) and every state any of them can be in: the engine's queries
# span the kinds. No state name is final for one kind and live for another, so one set of each
# serves them all (checked here, as the models load).
# (django-stubs types only the functional API's string form of the members.)
Kind = models.TextChoices(  # type: ignore[call-overload]
    "Kind", [(spec.name.upper(), (spec.name, spec.label)) for spec in kinds()]
)
STATE_CHOICES = list(dict(choice for spec in kinds() for choice in spec.states.choices).items())
FINAL_STATES = states_of(lambda spec: spec.final)
LIVE_STATES = frozenset({value for value, _ in STATE_CHOICES} - FINAL_STATES)
if any(FINAL_STATES & (set(spec.states.values) - spec.final) for spec in kinds()):
    raise ImproperlyConfigured("A state is final for one workload kind and live for another.")


class Preset(models.TextChoices):
    """What a job runs besides its own image and command (the jobs kind's presets)."""

    CUSTOM = "", "Custom"
    FINETUNE = "finetune", "Fine-tune"


@functools.lru_cache(maxsize=4096)
def parsed_volumes(texts: tuple[str, ...]) -> tuple[VolumeSpec, ...]:
    """Volume specs parsed once per distinct list (specs are immutable values)."""
    return tuple(parse_volume_spec(text) for text in texts)


class Workload(models.Model):
    """What the workload engine runs, whatever its kind: what to run (image, command, flavor ×
    units, volumes, env), the state the panel observed with its reason, and what the user
    wants (`stop_requested`). One table, so admission, reconcile, observation, logs and runs
    are one code path; each kind (controlpanel/kinds.py) is a proxy model of it whose manager
    sees its own rows only (Job, Notebook, App)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=20, choices=Kind.choices, default="job")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="workloads")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workloads"
    )
    name = models.CharField(max_length=100)
    image = models.CharField(max_length=300)
    command = models.JSONField(default=list, blank=True)
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="workloads")
    gpu = models.PositiveSmallIntegerField(default=1, help_text="Units of the flavor.")
    nodes = models.PositiveSmallIntegerField(
        default=1, help_text="Pods of `gpu` units each; a job of more than one is a JobSet."
    )
    preemptible = models.BooleanField(
        default=False,
        help_text="With Kueue: may borrow idle GPUs and be preempted (resumes from a checkpoint).",
    )
    volumes = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    timeout = models.PositiveIntegerField(default=DEFAULT_TIMEOUT_S, help_text="Seconds.")
    preset = models.CharField(max_length=20, choices=Preset.choices, blank=True, default="")
    params = models.JSONField(default=dict, blank=True)
    # Notebooks: the editor served, where (as observed), and the server's last activity.
    editor = models.CharField(max_length=20, blank=True, default="")
    url = models.CharField(max_length=500, blank=True, default="")
    last_activity_at = models.DateTimeField(null=True, blank=True)

    state = models.CharField(max_length=20, choices=STATE_CHOICES, default="QUEUED")
    state_reason = models.CharField(max_length=500, blank=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    run = models.PositiveIntegerField(default=1, help_text="Counts runs; 'run again' adds one.")
    stop_requested = models.BooleanField(default=False)
    queued_at = models.DateTimeField(default=timezone.now)
    admitted_at = models.DateTimeField(null=True, blank=True)
    # The run last handed to the backend: a GONE observation of it means its objects were
    # lost (ERROR), while before it the backend is simply asked to create them.
    launched_run = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    progress = models.JSONField(default=dict, blank=True)
    # The points its current run's curve keeps (CurvePoint rows; engine/curves.py).
    curve_points = models.PositiveIntegerField(default=0)
    log_cursor = models.TextField(blank=True, default="")
    log_lines = models.PositiveIntegerField(default=0)
    logs_archived = models.BooleanField(default=False)
    # A failed run's kept workspace claim, deleted after WORKSPACE_KEPT_DAYS (engine/workspaces.py).
    workspace_deleted_at = models.DateTimeField(null=True, blank=True)
    # A run's end notice: claimed once (notified_run, at notice_claimed_at), then handed to the
    # mail server and the webhook queue (notice_sent_run). A claim never handed over (a crash
    # between the two) is sent again by the sweep (tasks.notices_resend).
    notified_run = models.PositiveIntegerField(default=0)
    notice_claimed_at = models.DateTimeField(null=True, blank=True)
    notice_sent_run = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["project", "kind", "-created_at"]),
            models.Index(fields=["project", "state"]),
            models.Index(fields=["state"]),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.short_id})"

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]

    @property
    def gpus(self) -> int:
        return self.gpu * self.flavor.gpus_per_unit

    @property
    def volume_specs(self) -> tuple[VolumeSpec, ...]:
        """The volumes, parsed (stored canonical by job_submit, so they always parse; a
        VolumeSpecError here means the row was written by hand)."""
        return parsed_volumes(tuple(self.volumes))

    @property
    def loss_curve(self) -> list[list[Any]]:
        """The current run's training curve (engine/curves.py; read from its rows each time)."""
        from controlpanel.engine import curves

        return curves.read(self)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def backend_run(self) -> int:
        """The run number the backend names this row's current run by. The objects of a kind
        that keeps one name across runs (a notebook's address, its workspace claim): always
        1."""
        return 1 if kind_of(self).one_name else self.run


_W = TypeVar("_W", bound=Workload)


class KindManager(models.Manager[_W]):
    """The rows of one kind (its proxy's KIND)."""

    def get_queryset(self) -> models.QuerySet[_W]:
        return super().get_queryset().filter(kind=self.model.KIND)  # type: ignore[attr-defined]


class _OneKind:
    """A kind's proxy: its rows are made with its kind and its manager sees only them. Each
    kind's models.py declares one (`Meta: proxy, app_label "workloads"`) with its KIND and
    `objects = KindManager()`."""

    KIND: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not args:  # made by code, not loaded from the database
            self.kind = self.KIND  # type: ignore[attr-defined]


class JobEvent(models.Model):
    """One state change of a job with its time and a human reason."""

    job = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="events")
    run = models.PositiveIntegerField()
    state = models.CharField(max_length=20, choices=STATE_CHOICES)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.state} at {self.at:%H:%M:%S}"


class JobRun(models.Model):
    """One pod run (keyed by pod UID, or the local run id) with the container's own start and
    finish times from the pod status: what per-minute billing meters. Kept when a job is
    deleted, so usage stays billable."""

    uid = models.CharField(max_length=100, unique=True)
    job = models.ForeignKey(Workload, on_delete=models.SET_NULL, null=True, related_name="runs")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="job_runs")
    run = models.PositiveIntegerField()
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+")
    units = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    node = models.CharField(max_length=200, blank=True)
    # Its pod is being deleted (a group restart, a scale-down): when it will be gone at the
    # latest. A run whose pod goes without its end seen ends here, not when the panel notices.
    ends_by = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"run {self.run} of {self.job_id} ({self.uid})"


class JobLogLine(models.Model):
    """One line of a job's log, collected from the backend while it runs and archived in full
    when it ends, so the log outlives the pod. `seq` counts from 1 within the job's run."""

    job = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="log_lines_set")
    run = models.PositiveIntegerField()
    seq = models.PositiveIntegerField()
    text = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "run", "seq"], name="one_line_per_seq")
        ]

    def __str__(self) -> str:
        return f"{self.seq}: {self.text[:40]}"


class Orphan(models.Model):
    """A run of this install on the backend that no row names (made after the dump a restored
    database came from, or by a transaction that rolled back), from the sweep that first
    noticed it: its pods are stopped JOB_ORPHAN_GRACE_SECONDS later, its workspace deleted
    WORKSPACE_ORPHAN_GRACE_SECONDS later (engine/orphans.py). Listed on the capacity page
    meanwhile. A restore empties this table with the rest: the grace counts from the first
    sweep after it, however old the objects are."""

    kind = models.CharField(max_length=20)
    namespace = models.CharField(max_length=63)
    workload_id = models.CharField(max_length=100)
    run = models.PositiveIntegerField()
    project = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(null=True, blank=True)  # its newest object's creation
    noticed_at = models.DateTimeField(default=timezone.now)
    stopped_at = models.DateTimeField(null=True, blank=True)
    workspace_kept = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "namespace", "workload_id", "run"], name="one_orphan_per_run"
            )
        ]
        ordering = ["noticed_at", "pk"]

    def __str__(self) -> str:
        return f"orphan {self.kind} {self.workload_id} run {self.run} in {self.namespace}"


class CurvePoint(models.Model):
    """One point of a run's training curve, [step, loss, tokens_per_s, learning_rate], in the
    order logged (`id`): appended, never rewritten (engine/curves.py)."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="curve_rows")
    point = models.JSONField()

    class Meta:
        indexes = [models.Index(fields=["job", "id"])]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.point}"


class LogArchive(models.Model):
    """A run's ended log, moved out of PostgreSQL into the panel's object storage as one
    compressed object (engine/logarchive.py). `deleted_at`: removed by the retention."""

    job = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="log_archives")
    run = models.PositiveIntegerField()
    datastore = models.CharField(max_length=32)
    bucket = models.CharField(max_length=63)
    key = models.CharField(max_length=300)
    lines = models.PositiveIntegerField()
    size = models.BigIntegerField(help_text="Bytes of the compressed object.")
    archived_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "run"], name="one_log_archive_per_run")
        ]
        indexes = [models.Index(fields=["archived_at"])]

    def __str__(self) -> str:
        return f"log of run {self.run} of {self.job_id} at {self.bucket}/{self.key}"


class LogObjectDeletion(models.Model):
    """An archived log's object still to delete from the store: written with the deletion of
    its `LogArchive` row (a workload's or a project's delete), in the same transaction, and
    removed once the object is gone, so a store that is down when the workload is deleted loses
    no deletion (engine/logarchive.py: a task after commit, the retention task after that)."""

    datastore = models.CharField(max_length=32)
    bucket = models.CharField(max_length=63)
    key = models.CharField(max_length=300)
    requested_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=300, blank=True)

    class Meta:
        indexes = [models.Index(fields=["requested_at"])]

    def __str__(self) -> str:
        return f"to delete: {self.bucket}/{self.key}"
