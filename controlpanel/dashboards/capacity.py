"""The admins' capacity view: GPUs by model and by flavor (total, in use, free), the queue per
flavor with its oldest wait, the nodes that take no new work, and with Kueue each project's
share of the cohort (nominal, held, borrowed, lent).

The backend is read by the dashboards' periodic task (`capacity_refresh`), never by a page:
the reading is kept in the cache with the time it was taken (and, when a reading fails, the
reason beside the last good one), and the page says how old it is.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db.models import Count, Min, QuerySet
from django.utils import timezone

from controlpanel.engine.admission import WAITING_STATES
from controlpanel.engine.backend import get_backend
from controlpanel.engine.models import LIVE_STATES, Workload
from controlpanel.engine.orphans import orphan_report
from controlpanel.flavors.models import Flavor
from controlpanel.queues.selectors import kueue_on
from controlpanel.queues.sharing import sharing_figures
from controlpanel.streams.channels import capacity_read
from deploy.gpu_resources import mig_profile
from deploy.local.gpus import gpu_matches
from deploy.types import ClusterCapacity, GpuPool, NodeIssue

log = logging.getLogger(__name__)

CACHE_KEY = "ajuste:dashboards:capacity"
# A reading is kept this long: past it the page says it has none (the task is not running).
KEPT_S = 24 * 3600


def capacity_refresh() -> ClusterCapacity | None:
    """Read the backend now and keep the reading; a failure keeps the last good one and says
    why (an unreachable cluster, missing RBAC) on the page."""
    kept = cache.get(CACHE_KEY) or {}
    now = timezone.now().isoformat()
    try:
        capacity = get_backend().cluster_capacity()
    except Exception as exc:  # any failure is the page's to show, not the beat's to crash on
        log.warning("capacity: reading the backend failed: %s", exc)
        cache.set(
            CACHE_KEY, kept | {"error": str(exc) or type(exc).__name__, "tried_at": now}, KEPT_S
        )
        capacity_read()  # the page says why
        return None
    cache.set(
        CACHE_KEY,
        {"capacity": asdict(capacity), "read_at": now, "error": "", "tried_at": now},
        KEPT_S,
    )
    capacity_read()  # the capacity view's streams refresh it
    return capacity


def capacity_reading() -> tuple[ClusterCapacity | None, datetime | None, str]:
    """The kept reading, when it was taken, and why the last attempt failed ("" when it did
    not)."""
    kept = cache.get(CACHE_KEY) or {}
    raw = kept.get("capacity")
    capacity = None
    if raw:
        pools = tuple(GpuPool(**pool) for pool in raw.pop("pools"))
        issues = tuple(NodeIssue(**issue) for issue in raw.pop("issues"))
        capacity = ClusterCapacity(**raw, pools=pools, issues=issues)
    read_at = datetime.fromisoformat(kept["read_at"]) if kept.get("read_at") else None
    return capacity, read_at, kept.get("error", "")


def capacity_figures() -> dict[str, Any]:
    """What the capacity page and `/api/v1/capacity/` show: the kept reading and its age, GPU
    pools (whole GPUs and MIG slices apart, each with totals), the flavors' rows, CPU in use."""
    reading, read_at, error = capacity_reading()
    cpu_in_use = None
    if reading is not None:
        cpu_in_use = reading.millicpu_in_use if reading.backend != "local" else admitted_millicpu()
    pools = pool_rows(reading)
    return {
        "capacity": reading,
        "read_at": read_at,
        "error": error,
        "pools": pools,
        "totals": _totals(p for p in pools if not p["mig_profile"]),
        "mig_totals": _totals(p for p in pools if p["mig_profile"]),
        "flavors": flavor_rows(reading),
        "cpu_in_use": cpu_in_use,
        "orphans": orphan_report(),
        # With Kueue: each project's nominal, held, borrowed and lent GPUs (queues/sharing.py).
        "sharing": sharing_figures() if kueue_on() else None,
    }


def _totals(pools: Iterable[dict[str, Any]]) -> dict[str, int]:
    totals = dict.fromkeys(("total", "in_use", "unavailable", "free"), 0)
    for pool in pools:
        for key in totals:
            totals[key] += pool[key]
    return totals


def flavor_rows(capacity: ClusterCapacity | None) -> list[dict[str, Any]]:
    """Each enabled flavor: GPUs (or MIG slices) per unit, units running and waiting (from the
    workload rows), the oldest wait, and the units that would fit in the free GPUs (or slices)
    of its model now (None without a reading; a CPU flavor has no GPU figure)."""
    now = timezone.now()
    running: dict[int, int] = defaultdict(int)
    for flavor_id, units in _holding().values_list("flavor_id", "gpu"):
        running[flavor_id] += units
    waiting: dict[int, dict[str, Any]] = {
        row["flavor_id"]: dict(row)
        for row in Workload.objects.filter(state__in=WAITING_STATES, admitted_at=None)
        .values("flavor_id")
        .annotate(count=Count("id"), oldest=Min("queued_at"))
    }
    rows = []
    for flavor in Flavor.objects.filter(enabled=True):
        queue = waiting.get(flavor.pk, {})
        oldest = queue.get("oldest")
        rows.append(
            {
                "name": flavor.name,
                "gpu_model": flavor.gpu_model,
                "resource": flavor.resource_key,
                "mig_profile": mig_profile(flavor.resource_key),
                "gpus_per_unit": flavor.gpus_per_unit,
                "running_units": running.get(flavor.pk, 0),
                "running_gpus": running.get(flavor.pk, 0) * flavor.gpus_per_unit,
                "waiting": queue.get("count", 0),
                "oldest_wait_s": (now - oldest).total_seconds() if oldest else None,
                "free_units": _free_units(flavor, capacity),
            }
        )
    return rows


def _holding() -> QuerySet[Workload]:
    """Admitted work that is not over: it holds its flavor's units."""
    return Workload.objects.filter(state__in=LIVE_STATES).exclude(admitted_at=None)


def _free_units(flavor: Flavor, capacity: ClusterCapacity | None) -> int | None:
    if capacity is None or not flavor.is_gpu:
        return None
    free = sum(pool.free for pool in capacity.pools if runs_on(flavor, pool))
    return free // flavor.gpus_per_unit


def runs_on(flavor: Flavor, pool: GpuPool) -> bool:
    """Whether the flavor's units take GPUs of this pool: its model, and the resource it
    asks for (whole GPUs, or one MIG profile's slices)."""
    return flavor.resource_key == pool.resource and gpu_matches(flavor.to_spec(), pool.model)


def pool_rows(capacity: ClusterCapacity | None) -> list[dict[str, Any]]:
    """GPU models (and MIG profiles) with their numbers and the flavors that run on them."""
    if capacity is None:
        return []
    flavors = [f for f in Flavor.objects.filter(enabled=True) if f.is_gpu]
    return [
        asdict(pool)
        | {
            "free": pool.free,
            "mig_profile": mig_profile(pool.resource),
            "flavors": [f.name for f in flavors if runs_on(f, pool)],
        }
        for pool in capacity.pools
    ]


def admitted_millicpu() -> int:
    """Cores held by admitted, live work (flavor vCPU x units), where the backend cannot say."""
    return sum(
        vcpu * units * 1000
        for vcpu, units in _holding().values_list("flavor__vcpu_per_unit", "gpu")
    )
