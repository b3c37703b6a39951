"""The ledger follows the runs: every save of a JobRun (lifecycle._record_times writes one
per observation) and every end of a run (lifecycle.record_state closes its row with an
`update()`, which sends no post_save, then says `workload_ended`) records that run.

Recording runs inside the engine's transaction, so a run's row and its ledger commit together.
It is kept in a savepoint of its own: a fault in billing is logged and never undoes an
observation; the catch-up task (tasks.billing_catch_up) records what was missed.

Sightings: an observation of an open run, and every sweep's listing (`runs_seen`), note when
its pod was last seen alive. A run that ends in ERROR without the cluster reporting its end
(its pod vanished: `record_state` closed it when the panel noticed) is closed at its last
sighting instead, and marked estimated. After a recording, the project's budget is checked
(queued once the transaction commits; only for projects with a budget).

A deleted workload's runs stay (for billing) without their workload: its months in the
rollup (billing/rollup.py) move to the project's None rows in the deletion's transaction, and
who ran each run and what the workload was called are kept beside it (models.KeptRun).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import transaction
from django.db.models.signals import post_save, pre_delete
from django.dispatch import receiver
from django.utils import timezone

from controlpanel.billing.models import KeptRun, Meter, Sighting
from controlpanel.billing.rollup import rollup_forget_workload
from controlpanel.billing.services import run_record
from controlpanel.billing.tasks import budget_check_soon
from controlpanel.engine.lifecycle import workload_ended
from controlpanel.engine.models import JobRun, Workload
from controlpanel.engine.sweep import runs_seen
from controlpanel.projects.models import Project

log = logging.getLogger(__name__)
VANISHED_STATE = "ERROR"  # every kind's state for "the workload disappeared from the cluster"


def record_quietly(run_id: int, project_id: int | None = None) -> None:
    try:
        with transaction.atomic():
            run_record(run_id=run_id)
            if project_id is not None and _has_budget(project_id):
                budget_check_soon(project_id)
    except Exception:
        log.exception("billing: run %s not recorded now; the catch-up task will", run_id)


def _has_budget(project_id: int) -> bool:
    return Project.objects.filter(pk=project_id, monthly_budget__gt=0).exists()


def sightings_note(run_ids: Iterable[int], at: datetime) -> None:
    """The runs were seen alive at `at` (a later sighting only moves it forward)."""
    ids = list(run_ids)
    if not ids:
        return
    Sighting.objects.filter(run_id__in=ids, seen_at__lt=at, estimated=False).update(seen_at=at)
    have = set(Sighting.objects.filter(run_id__in=ids).values_list("run_id", flat=True))
    Sighting.objects.bulk_create(
        [Sighting(run_id=pk, seen_at=at) for pk in ids if pk not in have], ignore_conflicts=True
    )


@receiver(post_save, sender=JobRun, dispatch_uid="billing-run-saved")
def _run_saved(sender: Any, instance: JobRun, **kwargs: Any) -> None:
    if instance.started_at is None:
        return
    if instance.finished_at is None:
        try:
            with transaction.atomic():
                sightings_note([instance.pk], timezone.now())
        except Exception:
            log.exception("billing: sighting of run %s not noted", instance.pk)
    record_quietly(instance.pk, instance.project_id)


def _workload_deleted(sender: Any, instance: Workload, origin: Any = None, **kwargs: Any) -> None:
    if isinstance(origin, Project):
        return  # the project's rollup rows go with it
    rollup_forget_workload(workload_id=instance.pk)
    KeptRun.objects.bulk_create(
        KeptRun(
            run_id=run_id,
            workload=instance.pk,
            owner_id=instance.owner_id,
            name=instance.name,
            kind=instance.kind,
        )
        for run_id in JobRun.objects.filter(job=instance).values_list("pk", flat=True)
    )


# Each kind is a proxy model of Workload and sends as itself. Connected per model: a receiver
# of every sender would keep Django from deleting any other model's rows in bulk.
for _model in apps.get_models():
    if issubclass(_model, Workload):
        pre_delete.connect(
            _workload_deleted, sender=_model, dispatch_uid=f"billing-{_model._meta.label}-deleted"
        )


@receiver(runs_seen, dispatch_uid="billing-runs-seen")
def _runs_seen(sender: Any, uids: list[str], at: datetime, **kwargs: Any) -> None:
    try:
        with transaction.atomic():
            runs = JobRun.objects.filter(uid__in=uids, finished_at=None).exclude(started_at=None)
            sightings_note(runs.values_list("pk", flat=True), at)
    except Exception:
        log.exception("billing: the sweep's sightings were not noted")


@receiver(workload_ended, dispatch_uid="billing-run-ended")
def _run_ended(sender: Any, workload_id: str, run: int, **kwargs: Any) -> None:
    runs = JobRun.objects.filter(job_id=uuid.UUID(workload_id), run=run)
    vanished = Workload.objects.filter(pk=workload_id, state=VANISHED_STATE).exists()
    for run_id, project_id in runs.values_list("pk", "project_id"):
        if vanished:
            try:
                with transaction.atomic():
                    close_vanished(run_id)
            except Exception:
                log.exception("billing: run %s not closed at its last sighting", run_id)
        record_quietly(run_id, project_id)


def close_vanished(run_id: int) -> bool:
    """A run whose end the cluster never reported (its last recording saw it open, and the
    engine closed it when the pod was found gone): closed at its last sighting (never before
    its start, never after the engine's close) and marked estimated. True when it was."""
    run = JobRun.objects.select_for_update().filter(pk=run_id).first()
    if run is None or run.started_at is None or run.finished_at is None:
        return False
    meter = Meter.objects.filter(run=run).first()
    if meter is None or meter.finished_at is not None or meter.started_at != run.started_at:
        return False  # the cluster reported its end (recorded then), or nothing to compare
    sighting = Sighting.objects.filter(run=run).first()
    noticed = run.finished_at
    end = noticed
    if sighting is not None:
        end = min(noticed, max(run.started_at, sighting.seen_at))
    JobRun.objects.filter(pk=run.pk).update(finished_at=end)
    Sighting.objects.update_or_create(
        run=run, defaults={"seen_at": end, "estimated": True, "noticed_at": noticed}
    )
    return True
