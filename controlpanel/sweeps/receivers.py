"""A run's end (the engine's `workload_ended`, sent in the transaction that records it):
a trial's sweep advances, and a fine-tune that ended DONE records its adapter, both once that
transaction commits."""

from __future__ import annotations

import uuid
from typing import Any

from django.dispatch import receiver

from controlpanel.engine.lifecycle import workload_ended
from controlpanel.engine.models import Workload
from controlpanel.sweeps import tasks
from controlpanel.sweeps.models import Trial


@receiver(workload_ended, dispatch_uid="sweeps-run-ended")
def _run_ended(sender: Any, workload_id: str, run: int, **kwargs: Any) -> None:
    key = uuid.UUID(str(workload_id))
    for sweep_id in Trial.objects.filter(job_id=key).values_list("sweep_id", flat=True):
        tasks.sweep_advance.delay_on_commit(str(sweep_id))
    if Workload.objects.filter(pk=key, preset="finetune", state="DONE").exists():
        tasks.adapter_record.delay_on_commit(str(key), run)
