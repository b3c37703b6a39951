"""Reconcile Kueue's configuration from the panel's model (QUEUE_ENGINE=kueue): flavors,
priority classes, one ClusterQueue and LocalQueue per project; queues of deleted projects go."""

from __future__ import annotations

import logging

from controlpanel.core.install import install_id
from controlpanel.engine.backend import ensure_project, get_backend
from controlpanel.engine.models import Workload
from controlpanel.projects.models import Project
from controlpanel.queues.positions import positions_refresh
from controlpanel.queues.selectors import kueue_on, queue_flavors, queue_request
from controlpanel.queues.sharing import sharing_refresh

log = logging.getLogger(__name__)


def queues_reconcile() -> list[str]:
    """Apply what Kueue should hold; the ClusterQueues applied ([] when Kueue is not the
    queue). Each project's namespace is ensured first: its LocalQueue lives there."""
    if not kueue_on():
        return []
    from deploy.kubernetes.kueue import ensure_queues, remove_stale_queues  # cluster only

    backend = get_backend()
    install = install_id()
    projects = list(Project.objects.select_related("queue").order_by("pk"))
    for project in projects:
        ensure_project(project)
    api = backend.api  # type: ignore[attr-defined]  # QUEUE_ENGINE=kueue needs kubernetes
    applied = ensure_queues(
        api,
        flavors=queue_flavors(),
        queues=[queue_request(project, install=install) for project in projects],
        install=install,
    )
    removed = remove_stale_queues(api, keep=applied, install=install)
    if removed:
        log.info("Kueue: removed the ClusterQueues of deleted projects: %s", ", ".join(removed))
    return applied


def queues_observe() -> dict[str, int]:
    """Read what Kueue says of its queues for the pages (never read by a page itself): each
    waiting workload's place (one visibility call per project with waiting work) and every
    project's nominal, held, borrowed and lent GPUs. What was kept ({} when Kueue is not the
    queue)."""
    if not kueue_on():
        return {}
    from controlpanel.engine.admission import WAITING_STATES

    api = get_backend().api  # type: ignore[attr-defined]  # QUEUE_ENGINE=kueue needs kubernetes
    waiting: dict[int, list[str]] = {}
    rows = Workload.objects.filter(state__in=WAITING_STATES).values_list("project_id", "pk")
    for project_id, pk in rows:
        waiting.setdefault(project_id, []).append(str(pk))
    return {
        "positions": positions_refresh(api, waiting=waiting),
        "shares": sharing_refresh(api, install=install_id()),
    }
