"""What the engine needs of an app, a served model (controlpanel/engine/registry.py)."""

from __future__ import annotations

from controlpanel.engine.models import AppState as A
from controlpanel.engine.registry import KindSpec

KIND = KindSpec(
    name="app",
    label="App",
    plural="apps",
    states=A,
    final=frozenset({A.STOPPED, A.FAILED, A.ERROR}),
    waiting=A.QUEUED,
    failed=A.FAILED,
    startable=frozenset({A.STOPPED, A.FAILED, A.ERROR}),
    start_reason="started by {user}",
    start_refusal="The app is {state}: stop it first.",
    stoppable=frozenset({A.QUEUED, A.INITIALIZING, A.SCALING, A.RUNNING}),
    stopping=A.STOPPING,
    stopped=A.STOPPED,
    stop_reason="stopped by {user}",
    stop_refusal="The app is {state}: there is nothing to stop.",
    one_name=True,
    model="controlpanel.engine.models.App",
)
