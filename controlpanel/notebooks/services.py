"""The writes on notebooks (create, start, stop, delete, keep alive) and their idle stop. Each
writes the desired state and enqueues work after commit through the engine's one write path
(engine/services.py); the engine (admission, reconcile, observation, logs, runs) does the rest.

A notebook's life: STARTING (waiting for admission, then for its pod) → RUNNING → STOPPING →
STOPPED, and again from STARTING on the next start (a new run: billed and logged apart), at the
same address with the same workspace. DELETING removes its objects, then its row.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.accounts.local_guard import refuse_notebook_start
from controlpanel.engine import services as writes
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.notebooks.validation import validate_notebook
from controlpanel.projects.access import ProjectAccess

N = NotebookState
# An idle stop's reason (what its server last did is read by activity.py on a cluster, by the
# supervisor locally): its own words, never a user's request.
IDLE_REASON = "idle for {minutes} min: no kernel, terminal or request"


@transaction.atomic
def notebook_create(*, access: ProjectAccess, user: Any, data: Mapping[str, Any]) -> Notebook:
    """Validate and store a notebook, then start it through the project's quota."""
    refuse_notebook_start()
    spec = validate_notebook(project=access.project, data=data)
    # The image's container reference runs; its name in the admin's list is remembered.
    fields = vars(spec) | {"image": spec.image.image, "params": {"image": spec.image.name}}
    return writes.workload_create(
        access=access, user=user, model=Notebook, fields=fields, reason="created"
    )


def notebook_start(*, access: ProjectAccess, user: Any, notebook: Notebook) -> Notebook:
    """Start a stopped notebook again: a new run, same address, same workspace."""
    refuse_notebook_start()
    return writes.workload_start(access=access, user=user, workload=notebook)


def notebook_stop(
    *, access: ProjectAccess | None, user: Any, notebook: Notebook, reason: str = ""
) -> Notebook:
    """Stop a notebook (its rw volumes are pushed, its workspace kept). `access` None: the
    panel itself stops it (idle), with `reason`."""
    return writes.workload_stop(access=access, user=user, workload=notebook, reason=reason)


def notebook_delete(*, access: ProjectAccess, user: Any, notebook: Notebook) -> None:
    """Delete a notebook: its objects (workspace included), then its row. Its runs stay,
    for billing. A running notebook is stopped by the deletion (nothing is pushed)."""
    writes.workload_delete(access=access, user=user, workload=notebook)


def idle_deadline(notebook: Notebook) -> datetime | None:
    """When the notebook stops if it stays idle: its last activity plus the project's limit
    (None: no limit, or the backend does not report the server's activity)."""
    minutes = notebook.project.notebook_idle_minutes
    if not minutes or notebook.last_activity_at is None or notebook.state != N.RUNNING:
        return None
    return notebook.last_activity_at + timedelta(minutes=minutes)


@transaction.atomic
def notebook_keep_alive(*, access: ProjectAccess, user: Any, notebook: Notebook) -> Notebook:
    """ "Keep it running": counts as activity now, so the idle stop waits a full limit again."""
    notebook = writes.workload_locked(access=access, user=user, workload=notebook)
    if notebook.state != N.RUNNING:
        raise ValidationError(f"The notebook is {notebook.state}, not running.")
    notebook.last_activity_at = timezone.now()
    notebook.save(update_fields=["last_activity_at", "updated_at"])
    return notebook


def stop_idle_notebooks() -> int:
    """Stop the running notebooks idle past their project's limit (the sweep calls this);
    returns how many. A notebook whose activity is unknown is never stopped for idleness."""
    now, stopped = timezone.now(), 0
    running = Notebook.objects.filter(
        state=N.RUNNING, stop_requested=False, last_activity_at__isnull=False
    ).select_related("project")
    for notebook in running.exclude(project__notebook_idle_minutes=0):
        deadline = idle_deadline(notebook)
        if deadline is None or deadline > now:
            continue
        reason = IDLE_REASON.format(minutes=notebook.project.notebook_idle_minutes)
        try:
            notebook_stop(access=None, user=None, notebook=notebook, reason=reason)
        except ValidationError:
            continue  # it moved on meanwhile
        stopped += 1
    return stopped
