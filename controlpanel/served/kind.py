"""What the engine needs of an app, a served model (controlpanel/engine/registry.py): it serves
until stopped, at the same URL after every start; SCALING while its replicas move."""

from __future__ import annotations

from controlpanel.engine.registry import KindSpec
from controlpanel.served.states import AppState as A

FINAL = frozenset({A.STOPPED, A.FAILED, A.ERROR})

KIND = KindSpec(
    name="app",
    label="App",
    states=A,
    final=FINAL,
    waiting=A.QUEUED,
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
    stoppable=frozenset({A.QUEUED, A.INITIALIZING, A.SCALING, A.RUNNING}),
    one_name=True,
    model_path="controlpanel.served.models.App",
    driver_path="controlpanel.served.driver.DRIVER",
)
