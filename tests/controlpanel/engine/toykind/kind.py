"""What the engine needs of a batch: it runs once over its inputs and ends, like a job (whose
driver it borrows: the toy has no objects of its own in deploy/)."""

from __future__ import annotations

from controlpanel.engine.registry import KindSpec
from tests.controlpanel.engine.toykind.states import BatchState as B

FINAL = frozenset({B.DONE, B.INTERRUPTED, B.FAILED, B.ERROR})

KIND = KindSpec(
    name="batch",
    label="Batch inference",
    plural="batches",
    states=B,
    final=FINAL,
    waiting=B.QUEUED,
    ranks={B.QUEUED: 0, B.RUNNING: 1, B.INTERRUPTING: 2, **dict.fromkeys(FINAL, 3)},
    printing=frozenset({B.RUNNING, B.INTERRUPTING}),
    stoppable=frozenset({B.QUEUED, B.RUNNING}),
    stopping=B.INTERRUPTING,
    stopped=B.INTERRUPTED,
    judged_by_ends=True,
    model_path="tests.controlpanel.engine.toykind.models.Batch",
    driver_path="controlpanel.jobs.driver.DRIVER",
)
