"""What the engine needs of a job (controlpanel/engine/registry.py)."""

from __future__ import annotations

from controlpanel.engine.models import JobState as S
from controlpanel.engine.registry import KindSpec

FINAL = frozenset({S.DONE, S.INTERRUPTED, S.FAILED, S.ERROR, S.SYNC_FAILED})

KIND = KindSpec(
    name="job",
    label="Job",
    plural="jobs",
    states=S,
    final=FINAL,
    waiting=S.QUEUED,
    failed=S.FAILED,
    startable=FINAL,
    start_reason="run {run} requested by {user}",
    start_refusal="Only a finished job can be run again; stop it first.",
    stoppable=frozenset(set(S) - FINAL),
    stopping=S.INTERRUPTING,
    stopped=S.INTERRUPTED,
    stop_reason="stop requested by {user}",
    stop_refusal="The job already ended ({state}).",
    deletable=FINAL,
    delete_refusal="Stop the job before deleting it.",
    model="controlpanel.engine.models.Job",
)
