"""Runs of this install that no row names (`Orphan`): made after the dump a restored database
came from, or by a reconcile whose transaction rolled back. The sweep notes each the first time
it sees one and leaves it alone for JOB_ORPHAN_GRACE_SECONDS (a row committed late claims it
meanwhile; an operator restoring a dump raises it), then stops it, keeping its workspace until
WORKSPACE_ORPHAN_GRACE_SECONDS (at least a day) after it was noticed, then deletes that too.
Each is listed on the capacity page with those times (`orphan_report`).

The graces count from the sweep that noticed the run, not from its objects' creation: a
restored database has no note of them, so a workspace made a week after last night's dump is
still kept a day after the restore. Objects of another install, and those made before install
ids (`unlabelled`), never reach here (sweep.py leaves them out)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from controlpanel.engine.backend import get_backend
from controlpanel.engine.models import Orphan, Workload
from controlpanel.engine.registry import kind_of
from deploy.types import ObservedWorkload, WorkloadKind, WorkloadRef

log = logging.getLogger(__name__)
Key = tuple[str, str, str, int]


def unknown(seen: ObservedWorkload, row: Workload | None) -> bool:
    """Whether no row names this run: no row of that id in that namespace and kind, or a row
    at an earlier run than the cluster's (that run was made after the row was read back)."""
    if row is None or row.project.namespace != seen.namespace or row.kind != seen.kind.value:
        return True
    return not kind_of(row).one_name and seen.run > row.run


def collect_unknown(runs: list[ObservedWorkload], *, budget: int) -> int:
    """Note the unknown runs of this sweep, forget the noted ones that went or were claimed,
    stop and delete those whose grace ran out (`budget` actions at most); how many acted on."""
    now = timezone.now()
    noted = {_key_of(o): o for o in Orphan.objects.all()}
    found = {(o.kind.value, o.namespace, o.id, o.run): o for o in runs}
    fresh = [_note(seen, now) for key, seen in found.items() if key not in noted]
    Orphan.objects.bulk_create(fresh, ignore_conflicts=True)
    gone = [o.pk for key, o in noted.items() if key not in found and o.stopped_at is None]
    Orphan.objects.filter(pk__in=gone).delete()  # went by themselves, or a row claims them
    acted = 0
    for orphan in Orphan.objects.all():  # a few rows: the ones just noted too
        if acted >= budget:
            break
        acted += _act(orphan, now)
    return acted


def _act(orphan: Orphan, now: datetime) -> int:
    times = deadlines(orphan)
    ref = orphan_ref(orphan)
    if orphan.stopped_at is None and now >= times.stop_at:
        log.warning("orphan %s: no row names it since %s; stopped", orphan, orphan.noticed_at)
        kept = get_backend().stop_orphan(ref=ref)
        if not kept:
            orphan.delete()
            return 1
        orphan.stopped_at, orphan.workspace_kept = now, True
        orphan.save(update_fields=["stopped_at", "workspace_kept"])
        return 1
    if orphan.stopped_at is not None and now >= times.delete_at:
        log.warning("orphan %s: its workspace is deleted after the grace", orphan)
        get_backend().delete_orphan(ref=ref)
        orphan.delete()
        return 1
    return 0


@dataclass(frozen=True)
class Deadlines:
    """When a noted orphan is stopped, and when what it keeps (its workspace) is deleted."""

    stop_at: datetime
    delete_at: datetime


def deadlines(orphan: Orphan) -> Deadlines:
    stop_at = orphan.noticed_at + timedelta(seconds=settings.JOB_ORPHAN_GRACE_SECONDS)
    workspace = orphan.noticed_at + timedelta(seconds=settings.WORKSPACE_ORPHAN_GRACE_SECONDS)
    return Deadlines(stop_at=stop_at, delete_at=max(stop_at, workspace))


def orphan_ref(orphan: Orphan) -> WorkloadRef:
    return WorkloadRef(
        kind=WorkloadKind(orphan.kind),
        project=orphan.project,
        namespace=orphan.namespace,
        id=orphan.workload_id,
        run=orphan.run,
    )


def orphan_report() -> list[dict[str, object]]:
    """The noted orphans with their deadlines, oldest first (the capacity page)."""
    rows = []
    for orphan in Orphan.objects.all()[:500]:
        times = deadlines(orphan)
        rows.append(
            {
                "orphan": orphan,
                "stop_at": times.stop_at,
                "delete_at": times.delete_at,
                "stopped": orphan.stopped_at is not None,
            }
        )
    return rows


def _note(seen: ObservedWorkload, now: datetime) -> Orphan:
    return Orphan(
        kind=seen.kind.value,
        namespace=seen.namespace,
        workload_id=seen.id,
        run=seen.run,
        project=seen.ref.project,
        created_at=seen.created_at,
        noticed_at=now,
    )


def _key_of(orphan: Orphan) -> Key:
    return (orphan.kind, orphan.namespace, orphan.workload_id, orphan.run)
