"""What the engine needs of a notebook (controlpanel/engine/registry.py)."""

from __future__ import annotations

from controlpanel.engine.models import NotebookState as N
from controlpanel.engine.registry import KindSpec

KIND = KindSpec(
    name="notebook",
    label="Notebook",
    plural="notebooks",
    states=N,
    final=frozenset({N.STOPPED, N.FAILED, N.ERROR}),
    waiting=N.STARTING,
    failed=N.FAILED,
    startable=frozenset({N.STOPPED, N.FAILED, N.ERROR}),
    start_reason="started by {user}",
    start_refusal="The notebook is {state}: stop it first.",
    stoppable=frozenset({N.STARTING, N.RUNNING}),
    stopping=N.STOPPING,
    stopped=N.STOPPED,
    stop_reason="stopped by {user}",
    stop_refusal="The notebook is {state}: there is nothing to stop.",
    one_name=True,
    model="controlpanel.engine.models.Notebook",
)
