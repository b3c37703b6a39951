"""The ledger follows the runs: every save of a JobRun (lifecycle._record_times writes one
per observation) and every end of a run (lifecycle.record_state closes its row with an
`update()`, which sends no post_save, then says `workload_ended`) records that run.

Recording runs inside the engine's transaction, so a run's row and its ledger commit together.
It is kept in a savepoint of its own: a fault in billing is logged and never undoes an
observation; the catch-up task (tasks.billing_catch_up) records what was missed.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver

from controlpanel.billing.services import run_record
from controlpanel.workloads.lifecycle import workload_ended
from controlpanel.workloads.models import JobRun

log = logging.getLogger(__name__)


def record_quietly(run_id: int) -> None:
    try:
        with transaction.atomic():
            run_record(run_id=run_id)
    except Exception:
        log.exception("billing: run %s not recorded now; the catch-up task will", run_id)


@receiver(post_save, sender=JobRun, dispatch_uid="billing-run-saved")
def _run_saved(sender: Any, instance: JobRun, **kwargs: Any) -> None:
    if instance.started_at is not None:
        record_quietly(instance.pk)


@receiver(workload_ended, dispatch_uid="billing-run-ended")
def _run_ended(sender: Any, workload_id: str, run: int, **kwargs: Any) -> None:
    for run_id in JobRun.objects.filter(job_id=uuid.UUID(workload_id), run=run).values_list(
        "pk", flat=True
    ):
        record_quietly(run_id)
