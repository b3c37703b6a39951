"""Where waiting work stands, as pages, the API and the CLI show it (`queue_position`).

With the builtin engine the panel counts its own queue (engine/selectors.py). With Kueue the
place is Kueue's: the periodic task (`positions_refresh`, tasks.queues_observe) asks the
visibility API once per project with waiting work and keeps each workload's place in the cache
for a few periods; a page or an API answer reads that, never the cluster."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache

from controlpanel.engine.models import Workload
from controlpanel.projects.models import Project
from deploy.manifests import kueue

log = logging.getLogger(__name__)

PREFIX = "ajuste:queues:position:"


@dataclass(frozen=True)
class QueuePosition:
    """A waiting workload's place, counted from 1: in its project's queue (`local`) and, where
    it is another count, in the queue it shares with others (`cluster`: Kueue's ClusterQueue,
    or the one machine every project shares with the local backend); `said` in words."""

    local: int | None
    cluster: int | None
    said: str

    def as_dict(self) -> dict[str, Any]:
        return {"local": self.local, "cluster": self.cluster, "said": self.said}


def ordinal(number: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    if 10 <= number % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def kueue_place(*, local: int, cluster: int, project: str) -> QueuePosition:
    said = f"{ordinal(local)} in the queue for {project}"
    if cluster != local:  # another LocalQueue shares the ClusterQueue
        said += f", {ordinal(cluster)} in its ClusterQueue"
    return QueuePosition(local=local, cluster=cluster, said=said)


def kueue_position(workload: Workload) -> QueuePosition | None:
    """The place the last refresh kept for this workload (None: not waiting in Kueue, or not
    seen yet)."""
    kept = cache.get(_key(str(workload.pk)))
    if not kept:
        return None
    return kueue_place(local=kept[0], cluster=kept[1], project=workload.project.slug)


def kueue_places(rows: Iterable[Workload]) -> dict[str, QueuePosition]:
    """The kept places of the waiting rows of a list page, by id, in one cache read ({} with the
    builtin engine, whose list shows none)."""
    from controlpanel.engine.admission import WAITING_STATES
    from controlpanel.queues.selectors import kueue_on

    if not kueue_on():
        return {}
    waiting = {_key(str(row.pk)): row for row in rows if row.state in WAITING_STATES}
    kept = cache.get_many(list(waiting)) if waiting else {}
    return {
        str(waiting[key].pk): kueue_place(
            local=place[0], cluster=place[1], project=waiting[key].project.slug
        )
        for key, place in kept.items()
    }


def mark_places(rows: Iterable[Workload]) -> None:
    """Give each row of a list page its kept Kueue place as `queue_place` (None for most),
    which the list templates show under the state."""
    rows = list(rows)
    places = kueue_places(rows)
    for row in rows:
        row.queue_place = places.get(str(row.pk))  # type: ignore[attr-defined]


def _key(workload_id: str) -> str:
    return f"{PREFIX}{workload_id}"


def kept_seconds() -> int:
    """A place outlives a few refreshes, so a slow one never blanks it; a stale one goes."""
    return 3 * int(settings.QUEUES_OBSERVE_SECONDS)


def positions_refresh(api: Any, *, waiting: dict[int, list[str]]) -> int:
    """Ask Kueue where the waiting workloads of each project stand (`waiting`: project id →
    ids of its waiting rows) and keep it; the places kept. One visibility call per project.
    A project whose call fails keeps nothing new (its places expire) and the others go on."""
    from deploy.kubernetes.kueue_visibility import pending_positions  # cluster only

    kept = 0
    for project in Project.objects.filter(pk__in=list(waiting)).only("slug"):
        try:
            found = pending_positions(
                api, namespace=project.namespace, local_queue=kueue.LOCAL_QUEUE
            )
        except Exception as exc:  # one project's failure must not blank the others
            log.warning("Kueue visibility for %s failed: %s", project.slug, exc)
            continue
        places = {_key(p.workload_id): (p.local, p.cluster) for p in found}
        gone = [_key(i) for i in waiting[project.pk] if _key(i) not in places]
        cache.set_many(places, timeout=kept_seconds())
        cache.delete_many(gone)
        kept += len(places)
    return kept
