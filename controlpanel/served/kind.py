"""What the engine needs of an app, a served model (controlpanel/engine/registry.py): it serves
until stopped, at the same URL after every start; SCALING while its replicas move."""

from __future__ import annotations

from controlpanel.engine.registry import server_kind
from controlpanel.served.states import AppState as A

KIND = server_kind(
    name="app",
    states=A,
    waiting=A.QUEUED,
    ranks={
        A.QUEUED: 0,
        A.INITIALIZING: 1,
        A.RUNNING: 2,
        A.SCALING: 2,
        A.STOPPING: 3,
        A.DELETING: 3,
    },
    printing=frozenset({A.RUNNING, A.SCALING, A.STOPPING}),
    stoppable=frozenset({A.QUEUED, A.INITIALIZING, A.SCALING, A.RUNNING}),
    model_path="controlpanel.served.models.App",
    driver_path="controlpanel.served.driver.DRIVER",
)
