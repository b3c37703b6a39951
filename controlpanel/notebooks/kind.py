"""What the engine needs of a notebook (controlpanel/engine/registry.py): it runs until stopped
(or idle), at the same address with the same workspace after every start."""

from __future__ import annotations

from controlpanel.engine.registry import server_kind
from controlpanel.notebooks.states import NotebookState as N

KIND = server_kind(
    name="notebook",
    states=N,
    waiting=N.STARTING,
    ranks={N.STARTING: 0, N.RUNNING: 1, N.STOPPING: 2, N.DELETING: 3},
    printing=frozenset({N.RUNNING, N.STOPPING}),
    stoppable=frozenset({N.STARTING, N.RUNNING}),
    idle_deadline="controlpanel.notebooks.services.idle_deadline",
    gpu_idle="stop",  # its workspace is kept
    # Its server's activity is read (on a cluster) before the idle stop looks at it.
    chores={
        "activity_read": "controlpanel.notebooks.activity.cluster_activity_read",
        "idle_stopped": "controlpanel.notebooks.services.stop_idle_notebooks",
    },
    model_path="controlpanel.notebooks.models.Notebook",
    driver_path="controlpanel.notebooks.driver.DRIVER",
)
