"""What the engine needs of a notebook (controlpanel/engine/registry.py)."""

from __future__ import annotations

from controlpanel.engine.registry import KindSpec
from controlpanel.notebooks.states import NotebookState as N

FINAL = frozenset({N.STOPPED, N.FAILED, N.ERROR})

KIND = KindSpec(
    name="notebook",
    label="Notebook",
    plural="notebooks",
    states=N,
    final=FINAL,
    waiting=N.STARTING,
    running=N.RUNNING,
    failed=N.FAILED,
    error=N.ERROR,
    failures=frozenset({N.FAILED, N.ERROR}),
    ranks={N.STARTING: 0, N.RUNNING: 1, N.STOPPING: 2, N.DELETING: 3, **dict.fromkeys(FINAL, 4)},
    printing=frozenset({N.RUNNING, N.STOPPING}),
    startable=FINAL,
    start_reason="started by {user}",
    start_refusal="The notebook is {state}: stop it first.",
    stoppable=frozenset({N.STARTING, N.RUNNING}),
    stopping=N.STOPPING,
    stopped=N.STOPPED,
    stop_reason="stopped by {user}",
    stop_refusal="The notebook is {state}: there is nothing to stop.",
    one_name=True,
    idle_deadline="controlpanel.notebooks.services.idle_deadline",
    model_path="controlpanel.notebooks.models.Notebook",
    driver_path="controlpanel.notebooks.driver.DRIVER",
    # Its server's activity is read (on a cluster) before the idle stop looks at it.
    chores={
        "activity_read": "controlpanel.notebooks.activity.cluster_activity_read",
        "idle_stopped": "controlpanel.notebooks.services.stop_idle_notebooks",
    },
)
