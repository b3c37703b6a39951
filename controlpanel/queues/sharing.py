"""Each project's share of the cohort's GPUs for the admins' capacity view (QUEUE_ENGINE=kueue):
nominal quota, GPUs held, borrowed from idle projects and lent to busy ones, and the limits.

Read from the ClusterQueues by the periodic task (`sharing_refresh`, tasks.queues_observe) and
kept in the cache with the time it was read; the page shows the kept reading and its age."""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.utils import timezone

log = logging.getLogger(__name__)

CACHE_KEY = "ajuste:queues:sharing"
KEPT_S = 24 * 3600


def sharing_refresh(api: Any, *, install: str) -> int:
    """Read every project ClusterQueue now and keep the rows; how many. A failure keeps the
    last good reading and says why beside it."""
    from deploy.kubernetes.kueue_visibility import cluster_queue_shares  # cluster only

    kept = cache.get(CACHE_KEY) or {}
    now = timezone.now().isoformat()
    try:
        shares = cluster_queue_shares(api, install=install)
    except Exception as exc:  # the page shows it; the beat goes on
        log.warning("Kueue: reading the ClusterQueues failed: %s", exc)
        cache.set(CACHE_KEY, kept | {"error": str(exc) or type(exc).__name__}, KEPT_S)
        return 0
    rows = [asdict(share) for share in shares]
    cache.set(CACHE_KEY, {"rows": rows, "read_at": now, "error": ""}, KEPT_S)
    return len(rows)


def sharing_figures() -> dict[str, Any]:
    """What the capacity page shows of the cohort: rows by project then flavor, the totals,
    when they were read and why the last reading failed ("" when it did not)."""
    kept = cache.get(CACHE_KEY) or {}
    rows = sorted(kept.get("rows") or [], key=lambda r: (r["project"], r["flavor"]))
    totals = {k: sum(r[k] for r in rows) for k in ("nominal", "used", "borrowed", "lent")}
    read_at = datetime.fromisoformat(kept["read_at"]) if kept.get("read_at") else None
    return {"rows": rows, "totals": totals, "read_at": read_at, "error": kept.get("error", "")}
