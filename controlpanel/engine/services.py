"""The one write path of every workload kind: a new workload, a new run, a stop (with a
reason), a delete, and the row locked for a user. Each writes the desired state and enqueues
work after commit (`delay_on_commit`); the engine's tasks reconcile toward it.

What differs between kinds is what they declare (registry.py): the states a start or a stop is
allowed from and leads to, their words, and how their objects go when they are deleted. The
rest, a new run's reset above all, is written once: every kind starts a run from nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel import audit
from controlpanel.engine import curves, tasks
from controlpanel.engine.lifecycle import record_state
from controlpanel.engine.models import DELETING, JobEvent, JobLogLine, Workload
from controlpanel.engine.registry import KindSpec, kind_of
from controlpanel.projects.access import ProjectAccess
from controlpanel.streams import channels
from storage.volumes import render_volume_spec

W = TypeVar("W", bound=Workload)


def workload_locked(*, access: ProjectAccess | None, user: Any, workload: W) -> W:
    """The workload's row, locked, as its kind's model, once the user may act on it (its
    owner or a manager). `access` None: the panel itself acts (an idle stop)."""
    kind = kind_of(workload)
    if access is not None and not (access.can_manage or workload.owner_id == user.pk):
        raise PermissionDenied(f"Only the {kind.name}'s owner or a project manager can do this.")
    locked: W = kind.model.objects.select_for_update(of=("self",)).get(pk=workload.pk)
    return locked


# savepoint=False: every caller's own transaction rolls the whole submission back on an error
# (no SAVEPOINT/RELEASE round trips per submit, #27).
@transaction.atomic(savepoint=False)
def workload_create(
    *, access: ProjectAccess, user: Any, model: type[W], fields: Mapping[str, Any], reason: str
) -> W:
    """Store a new workload of a kind (`model`, its proxy) from a valid request's `fields`
    (its volumes rendered as stored), waiting for admission. The row comes back with its
    relations as a read would find them (no runs, its one event), so the API answers from it."""
    volumes = [render_volume_spec(spec) for spec in fields.get("volumes", ())]
    workload = model(project=access.project, owner=user, **{**fields, "volumes": volumes})
    workload.state, workload.state_reason = kind_of(workload).waiting, reason
    workload.save(force_insert=True)
    event = JobEvent.objects.create(
        job=workload, run=workload.run, state=workload.state, reason=reason
    )
    _known(workload, runs=[], events=[event])
    channels.workload_changed(project_id=access.project.pk, workload_id=workload.pk, what="new")
    audit.record(
        "workload.start", actor=user, project=access.project, target=workload, name=workload.name
    )
    tasks.admit_soon(access.project.pk)
    return workload


def _known(workload: Workload, **related: list[Any]) -> None:
    """`workload.<name>.all()` answers these rows with no query, as after prefetch_related."""
    cache = workload.__dict__.setdefault("_prefetched_objects_cache", {})
    for name, rows in related.items():
        rows_qs = getattr(workload, name).all()
        rows_qs._result_cache, rows_qs._prefetch_done = rows, True
        cache[name] = rows_qs


def _new_run(workload: Workload) -> None:
    """What a run leaves on the row goes: the next starts from nothing, whatever the kind."""
    workload.run += 1
    workload.stop_requested = False
    workload.queued_at = timezone.now()
    workload.admitted_at = workload.started_at = workload.finished_at = None
    workload.exit_code = workload.last_activity_at = None
    workload.progress = {}
    curves.replace(workload, [])
    workload.log_cursor, workload.log_lines, workload.logs_archived = "", 0, False
    workload.workspace_deleted_at = None


@transaction.atomic
def workload_start(*, access: ProjectAccess, user: Any, workload: W) -> W:
    """A new run (billed and logged apart), queued behind the others."""
    workload = workload_locked(access=access, user=user, workload=workload)
    kind = kind_of(workload)
    if workload.state not in kind.startable:
        raise ValidationError(kind.said(kind.start_refusal, state=workload.state))
    _new_run(workload)
    workload.save()
    reason = kind.said(kind.start_reason, run=workload.run, user=user.username)
    record_state(workload, kind.waiting, reason)
    audit.record(
        "workload.start",
        actor=user,
        project=workload.project,
        target=workload,
        name=workload.name,
        run=workload.run,
    )
    tasks.admit_soon(workload.project_id)
    return workload


@transaction.atomic
def workload_stop(*, access: ProjectAccess | None, user: Any, workload: W, reason: str = "") -> W:
    """Stop a workload: its stopping state until the backend has stopped it (rw volumes are
    pushed). `reason`: why, when the panel stops it (idle, a budget), instead of who asked."""
    workload = workload_locked(access=access, user=user, workload=workload)
    kind = kind_of(workload)
    if workload.state not in kind.stoppable:
        raise ValidationError(kind.said(kind.stop_refusal, state=workload.state))
    audit.record(
        "workload.stop",
        actor=user,
        project=workload.project,
        target=workload,
        name=workload.name,
        reason=reason,
    )
    if not workload.stop_requested:
        workload.stop_requested = True
        workload.save(update_fields=["stop_requested", "updated_at"])
        if workload.launched_run < workload.run:
            # Never handed to the backend in this run: nothing runs there.
            said = reason or f"stopped by {user.username}"
            record_state(workload, kind.stopped, f"{said} before it started")
            tasks.admit_soon(workload.project_id)
            return workload
        record_state(
            workload, kind.stopping, reason or kind.said(kind.stop_reason, user=user.username)
        )
    tasks.job_reconcile.delay_on_commit(str(workload.pk))
    return workload


@transaction.atomic
def workload_delete(*, access: ProjectAccess, user: Any, workload: Workload) -> None:
    """Delete a workload, its objects and its log (its billed runs stay)."""
    workload = workload_locked(access=access, user=user, workload=workload)
    kind = kind_of(workload)
    if kind.deletable is not None and workload.state not in kind.deletable:
        raise ValidationError(kind.delete_refusal)
    audit.record(
        "workload.delete",
        actor=user,
        project=workload.project,
        target=workload,
        name=workload.name,
    )
    if kind.one_name:
        _delete_objects_first(kind, user, workload)
    else:
        _delete_row_first(workload)


def _delete_objects_first(kind: KindSpec, user: Any, workload: Workload) -> None:
    """Its objects outlive its runs: they go first (DELETING, reconciled), then the row."""
    if workload.launched_run == 0:
        _delete(workload)  # never reached the backend: nothing to remove there
        return
    workload.stop_requested = True
    workload.save(update_fields=["stop_requested", "updated_at"])
    record_state(workload, DELETING, f"deleted by {user.username}")
    tasks.job_reconcile.delay_on_commit(str(workload.pk))


def _delete(workload: Workload) -> None:
    """The row goes; its project's lists hear of it once that commits."""
    project_id, workload_id = workload.project_id, workload.pk
    workload.delete()
    channels.workload_changed(project_id=project_id, workload_id=workload_id, what="deleted")


def _delete_row_first(workload: Workload) -> None:
    """Each run has objects of its own: the row goes now, each run's objects after commit."""
    project = workload.project
    refs = [
        (project.slug, project.namespace, str(workload.pk), run)
        for run in range(1, workload.run + 1)
    ]
    JobLogLine.objects.filter(job=workload).delete()
    _delete(workload)
    tasks.job_cleanup.delay_on_commit(refs)
