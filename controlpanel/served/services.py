"""The writes on apps (create, start, stop, delete): each stores the desired state and
enqueues work after commit through the engine's one write path (engine/services.py); the
engine (admission, reconcile, observation, logs, runs) does the rest, as for notebooks.

An app's life: QUEUED (waiting for admission) → INITIALIZING (weights pulled, server loading) →
RUNNING (SCALING while its replicas move toward what is wanted) → STOPPING → STOPPED, and again
from QUEUED on the next start, at the same URL. DELETING removes its objects, then its row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from controlpanel.engine import services as writes
from controlpanel.engine.contract import SpecError
from controlpanel.projects.access import ProjectAccess
from controlpanel.served.models import App
from controlpanel.served.validation import validate_app

PUBLIC_REFUSAL = "Only the project's managers can make an app public."


@transaction.atomic
def app_create(*, access: ProjectAccess, user: Any, data: Mapping[str, Any]) -> App:
    """Validate and store an app, then start it through the project's quota."""
    spec = validate_app(project=access.project, data=data)
    if spec.params["public"] and not access.can_manage:
        # A public app serves its image's pages and API to anyone, with no log-in: the
        # project's decision, not any member's (issue 25).
        raise SpecError({"public": [PUBLIC_REFUSAL]})
    return writes.workload_create(
        access=access, user=user, model=App, fields=vars(spec), reason="created"
    )


def app_start(*, access: ProjectAccess, user: Any, app: App) -> App:
    """Start a stopped app again: a new run (billed apart), the same URL."""
    return writes.workload_start(access=access, user=user, workload=app)


def app_stop(*, access: ProjectAccess | None, user: Any, app: App, reason: str = "") -> App:
    """Stop an app: its replicas go, its URL stays (it answers 503 until started again).
    `reason`: why, when the panel stops it (a budget reached), instead of who asked."""
    return writes.workload_stop(access=access, user=user, workload=app, reason=reason)


def app_delete(*, access: ProjectAccess, user: Any, app: App) -> None:
    """Delete an app: its objects, then its row. Its runs stay, for billing."""
    writes.workload_delete(access=access, user=user, workload=app)
