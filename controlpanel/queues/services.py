"""Reconcile Kueue's configuration from the panel's model (QUEUE_ENGINE=kueue): flavors,
priority classes, one ClusterQueue and LocalQueue per project; queues of deleted projects go."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from controlpanel import audit
from controlpanel.core.install import install_id
from controlpanel.engine.backend import ensure_project, get_backend
from controlpanel.engine.models import Workload
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project
from controlpanel.queues.models import ProjectQueue
from controlpanel.queues.positions import positions_refresh
from controlpanel.queues.selectors import kueue_on, queue_flavors, queue_request
from controlpanel.queues.sharing import sharing_refresh
from controlpanel.streams.channels import capacity_read

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
    kept = {
        "positions": positions_refresh(api, waiting=waiting),
        "shares": sharing_refresh(api, install=install_id()),
    }
    capacity_read()  # the capacity view's shares are new: its streams refresh it
    return kept


SHARING_FIELDS = ("borrowing_limit", "lending_limit", "fair_sharing_weight")
SITE_ADMINS_ONLY = "Only site admins change how a project shares GPUs with the others; ask one."


@transaction.atomic
def project_queue_update(
    *, access: ProjectAccess, changes: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """Change how the project shares GPUs in Kueue's cohort (site admins only): its borrowing
    and lending limits (None: no limit) and its fair-sharing weight. Every value is checked
    before any is written (ValidationError by field); each change is one audit event with the
    old and new values, and Kueue's configuration follows after the commit (receivers.py).
    Returns each changed field's (old, new)."""
    sharing_check(access=access)
    project = access.project
    errors: dict[str, list[str]] = {}
    values: dict[str, Any] = {}
    for name, value in changes.items():
        try:
            values[name] = _sharing_value(name, value, project)
        except ValidationError as exc:
            errors[name[:64]] = exc.messages
    if errors:
        raise ValidationError(errors)
    row = ProjectQueue.objects.select_for_update().filter(project=project).first()
    row = row or ProjectQueue(project=project)
    changed = {n: (getattr(row, n), v) for n, v in values.items() if getattr(row, n) != v}
    if changed:
        for name, (_, new) in changed.items():
            setattr(row, name, new)
        row.save()
        details = {n: f"{_said(old)} → {_said(new)}" for n, (old, new) in changed.items()}
        audit.record("project.sharing", actor=None, project=project, target=project, **details)
    return changed


def sharing_check(*, access: ProjectAccess) -> None:
    """Refuse (PermissionDenied) anyone but a site admin, before any value is read."""
    if not access.is_admin:
        raise PermissionDenied(SITE_ADMINS_ONLY)


def _sharing_value(name: str, value: Any, project: Project) -> int | None:
    if name not in SHARING_FIELDS:
        raise ValidationError(
            f"{name[:64]!r} is no sharing setting; they are {', '.join(SHARING_FIELDS)}."
        )
    if value in (None, ""):
        if name == "fair_sharing_weight":
            raise ValidationError("Give a weight from 1 to 1000.")
        return None  # no limit
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValidationError("Give a whole number.")
    text = str(value).strip()
    if not (len(text) <= 9 and text.removeprefix("-").isdigit()):
        raise ValidationError(f"{text[:40]!r} is not a whole number.")
    number = int(text)
    if name == "fair_sharing_weight" and not 1 <= number <= 1000:
        raise ValidationError("Give a weight from 1 to 1000.")
    if number < 0:
        raise ValidationError("Give 0 or more (empty: no limit).")
    if name == "lending_limit" and number > project.gpu_quota:
        raise ValidationError(
            f"A project lends at most its own GPU quota ({project.gpu_quota}); empty lends all."
        )
    return number


def _said(value: Any) -> str:
    return "no limit" if value is None else str(value)
