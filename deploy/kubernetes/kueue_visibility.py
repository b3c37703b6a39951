"""What Kueue says of its queues (QUEUE_ENGINE=kueue), read by the panel's periodic task and
never by a page:

- where each waiting Workload of a LocalQueue stands, from Kueue's visibility API
  (`visibility.kueue.x-k8s.io/v1beta1`, `.../localqueues/<name>/pendingworkloads`: each item's
  `positionInLocalQueue` and `positionInClusterQueue`, counted from 0);
- each project ClusterQueue's GPUs: its nominal quota and limits (spec) and what it holds and
  borrows (status `flavorsReservation`), from which what it lends follows (`sharing`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.manifests.kueue import DEFAULT_FLAVOR

VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta1"
# Every object of a workload is named after its id (deploy/names.py: job-<id>-r<run>, nb-<id>,
# app-<id>), and so are the pods and Workloads Kueue makes for them.
WORKLOAD_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Pending:
    """One waiting workload's place, counted from 1: in its LocalQueue and its ClusterQueue."""

    workload_id: str
    local: int
    cluster: int


def pending_positions(api: KubeApi, *, namespace: str, local_queue: str) -> list[Pending]:
    """The waiting workloads of one LocalQueue, in queue order (Kueue's own order: priority,
    then creation). Items that name no workload of ours are left out."""
    path = f"{VISIBILITY}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"
    summary = api.get(path)
    found = []
    for item in summary.get("items") or []:
        workload_id = _workload_id(item)
        if workload_id is not None:
            found.append(
                Pending(
                    workload_id=workload_id,
                    local=int(item.get("positionInLocalQueue", 0)) + 1,
                    cluster=int(item.get("positionInClusterQueue", 0)) + 1,
                )
            )
    return found


def _workload_id(item: Obj) -> str | None:
    meta = item.get("metadata") or {}
    for text in [ref.get("name", "") for ref in meta.get("ownerReferences") or []] + [
        meta.get("name", "")
    ]:
        match = WORKLOAD_ID.search(str(text))
        if match:
            return match.group(0)
    return None


@dataclass(frozen=True)
class Share:
    """One project's GPUs of one flavor in the cohort: its nominal quota, what it holds (its
    own and borrowed), what it borrows, what of its idle quota others use (`lent`), and its
    limits (None: none)."""

    project: str
    cluster_queue: str
    flavor: str
    resource: str
    nominal: int
    used: int
    borrowed: int
    lent: int
    borrowing_limit: int | None
    lending_limit: int | None


def cluster_queue_shares(api: KubeApi, *, install: str = "") -> list[Share]:
    """Every project ClusterQueue of this install, one row per GPU flavor (the default flavor's
    CPU and memory are left out)."""
    selector = names.selector({names.MANAGED_BY: names.MANAGER, names.KIND: "project"})
    items, _ = api.list("ClusterQueue", None, label_selector=selector)
    return sharing(item for item in items if names.belongs(item, install))


def sharing(queues: Iterable[Obj]) -> list[Share]:
    """The rows of `cluster_queue_shares` from ClusterQueue objects. Kueue reports what each
    queue borrows, not from whom: what a flavor's borrowers take is counted as lent by the
    queues with idle, lendable quota of it, in proportion to that quota."""
    rows = [row for queue in queues for row in _rows(queue)]
    by_flavor: dict[tuple[str, str], list[Share]] = {}
    for row in rows:
        by_flavor.setdefault((row.flavor, row.resource), []).append(row)
    lent: dict[tuple[str, str, str], int] = {}
    for key, group in by_flavor.items():
        borrowed = sum(row.borrowed for row in group)
        idle = {row.cluster_queue: _lendable(row) for row in group}
        for name, share in _apportion(borrowed, idle).items():
            lent[(*key, name)] = share
    return [
        replace(row, lent=lent.get((row.flavor, row.resource, row.cluster_queue), 0))
        for row in rows
    ]


def _rows(queue: Obj) -> list[Share]:
    meta, spec = queue["metadata"], queue.get("spec") or {}
    held = _amounts((queue.get("status") or {}).get("flavorsReservation") or [])
    project = (meta.get("labels") or {}).get(names.PROJECT, meta["name"])
    rows = []
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            if flavor["name"] == DEFAULT_FLAVOR:
                continue
            for resource in flavor.get("resources") or []:
                total, borrowed = held.get((flavor["name"], resource["name"]), (0, 0))
                rows.append(
                    Share(
                        project=project,
                        cluster_queue=meta["name"],
                        flavor=flavor["name"],
                        resource=resource["name"],
                        nominal=_count(resource.get("nominalQuota")),
                        used=total,
                        borrowed=borrowed,
                        lent=0,
                        borrowing_limit=_limit(resource.get("borrowingLimit")),
                        lending_limit=_limit(resource.get("lendingLimit")),
                    )
                )
    return rows


def _amounts(flavors: list[Obj]) -> dict[tuple[str, str], tuple[int, int]]:
    return {
        (flavor["name"], item["name"]): (_count(item.get("total")), _count(item.get("borrowed")))
        for flavor in flavors
        if flavor["name"] != DEFAULT_FLAVOR  # CPU and memory: quantities, no GPU rows
        for item in flavor.get("resources") or []
    }


def _lendable(row: Share) -> int:
    """The idle part of the row's nominal quota that others may take."""
    idle = max(0, row.nominal - row.used)
    return idle if row.lending_limit is None else min(idle, row.lending_limit)


def _apportion(total: int, weights: dict[str, int]) -> dict[str, int]:
    """`total` split in whole parts in proportion to `weights` (largest remainders first), no
    part over its weight."""
    pool = sum(weights.values())
    if not total or not pool:
        return dict.fromkeys(weights, 0)
    total = min(total, pool)
    exact = {name: total * weight / pool for name, weight in weights.items()}
    parts = {name: int(share) for name, share in exact.items()}
    rest = total - sum(parts.values())
    for name in sorted(exact, key=lambda n: (parts[n] - exact[n], n))[:rest]:
        parts[name] += 1
    return parts


def _count(value: object) -> int:
    """A GPU quantity (a whole number; Kueue writes them as integers or strings)."""
    if value is None or value == "":
        return 0
    return int(float(str(value)))


def _limit(value: object) -> int | None:
    return None if value is None else _count(value)
