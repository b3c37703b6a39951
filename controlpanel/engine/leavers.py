"""When someone leaves, their work stops (issue 25): a member removed from a project, or an
account deactivated, no longer runs anything there. Their queued jobs never launch (with the
`rw`/`rwd` volumes they were given), their notebooks stop (rw volumes pushed, workspace kept),
their apps stop serving (their address kept); a manager may start any of it again, as theirs.
Each stop is the engine's own (workload_stop), with the reason in the workload's history."""

from __future__ import annotations

from typing import Any

from controlpanel.engine.models import Workload
from controlpanel.engine.registry import kind_of
from controlpanel.engine.services import workload_stop
from controlpanel.projects.models import Project


def leaver_work(*, user: Any, project: Project | None = None) -> list[Workload]:
    """What `user` owns that still runs or waits (in `project`, or anywhere)."""
    rows = Workload.objects.filter(owner=user, stop_requested=False).select_related("project")
    if project is not None:
        rows = rows.filter(project=project)
    return [w for w in rows.order_by("created_at") if w.state in kind_of(w).stoppable]


def leaver_work_stop(*, user: Any, reason: str, project: Project | None = None) -> list[Workload]:
    """Stop what `user` owns (in `project`, or anywhere): the workloads stopped."""
    return [
        workload_stop(access=None, user=None, workload=workload, reason=reason)
        for workload in leaver_work(user=user, project=project)
    ]
