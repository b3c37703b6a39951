"""What the engine needs of an app, a served model (controlpanel/engine/registry.py)."""

from __future__ import annotations

from controlpanel.engine.registry import KindSpec
from controlpanel.served.states import AppState as A

FINAL = frozenset({A.STOPPED, A.FAILED, A.ERROR})

KIND = KindSpec(
    name="app",
    label="App",
    plural="apps",
    states=A,
    final=FINAL,
    waiting=A.QUEUED,
    running=A.RUNNING,
    failed=A.FAILED,
    error=A.ERROR,
    failures=frozenset({A.FAILED, A.ERROR}),
    ranks={
        A.QUEUED: 0,
        A.INITIALIZING: 1,
        A.RUNNING: 2,
        A.SCALING: 2,
        A.STOPPING: 3,
        A.DELETING: 3,
        **dict.fromkeys(FINAL, 4),
    },
    printing=frozenset({A.RUNNING, A.SCALING, A.STOPPING}),
    startable=FINAL,
    start_reason="started by {user}",
    start_refusal="The app is {state}: stop it first.",
    stoppable=frozenset({A.QUEUED, A.INITIALIZING, A.SCALING, A.RUNNING}),
    stopping=A.STOPPING,
    stopped=A.STOPPED,
    stop_reason="stopped by {user}",
    stop_refusal="The app is {state}: there is nothing to stop.",
    one_name=True,
    model_path="controlpanel.served.models.App",
    driver_path="controlpanel.served.driver.DRIVER",
)
