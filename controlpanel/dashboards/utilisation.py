"""GPU utilisation from a Prometheus that scrapes NVIDIA's DCGM exporter (DCGM_PROMETHEUS_URL).

One instant query over the Prometheus HTTP API (`/api/v1/query`) averages the chosen metric
over a window, by namespace and pod; a pod is mapped to its workload by the workload's id in
its name (`job-<id>-r<run>-…`, `nb-<id>-0`, `app-<id>-…`, deploy/names.py). Answers, failures
included, are kept a minute in the cache, so viewers and htmx refreshes cost one query a
minute; the call has a short timeout. Without a source, or when Prometheus fails, the figure is
None with the reason: the pages say "no data", never 0.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from controlpanel.dashboards.filters import DashboardFilters
from controlpanel.dashboards.models import WorkloadDay
from controlpanel.dashboards.selectors import Scope, workloads
from controlpanel.engine.models import Workload
from controlpanel.projects.models import Project

# The workload's id in its pods' names (see deploy/names.py): job, notebook and app pods.
POD_NAME = re.compile(
    r"^(?:job|nb|app)-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-"
)
KEPT_S = 60
NO_SOURCE = "no DCGM source configured (DCGM_PROMETHEUS_URL)"
# Metrics that are a ratio (0 to 1) rather than a percentage.
RATIO_METRICS = frozenset({"DCGM_FI_PROF_GR_ENGINE_ACTIVE"})


@dataclass(frozen=True)
class Utilisation:
    """Mean GPU utilisation (percent) by workload id over a window; `problem` says why there
    is none ("" when Prometheus answered: a workload absent from `by_workload` had no samples)."""

    by_workload: dict[str, float] = field(default_factory=dict)
    problem: str = ""

    def of(self, workload_id: Any) -> float | None:
        return self.by_workload.get(str(workload_id))


def utilisation_read(
    *, namespace: str, start: datetime, end: datetime, workload: Any = None
) -> Utilisation:
    """Mean utilisation per workload in the namespaces `namespace` matches (a regular
    expression) from `start` to `end` (`end` is clipped to now); only `workload`'s pods when
    one is given. Namespaces are DNS labels and ids UUIDs: nothing in them is special to a
    regular expression, nor needs escaping in a PromQL string (where a backslash would)."""
    if not settings.DCGM_PROMETHEUS_URL:
        return Utilisation(problem=NO_SOURCE)
    # A window that runs to now is evaluated at the last whole minute: refreshes within a
    # minute are one cached query. One that ended is evaluated at its end.
    now = timezone.now()
    at = int(end.timestamp()) if end < now else int(now.timestamp()) // KEPT_S * KEPT_S
    window = max(60, at - int(start.timestamp()))
    pods = f"(job|nb|app)-{workload}-.*" if workload is not None else "(job|nb|app)-.*"
    selector = f'namespace=~"{namespace}",pod=~"{pods}"'
    query = (
        f"avg by (namespace, pod) (avg_over_time({settings.DCGM_METRIC}{{{selector}}}[{window}s]))"
    )
    key = (
        "ajuste:dcgm:"
        + hashlib.sha256(f"{settings.DCGM_PROMETHEUS_URL} {query} {at}".encode()).hexdigest()
    )
    kept = cache.get(key)
    if kept is None:
        kept = _query(query, at)
        cache.set(key, kept, KEPT_S)
    values, problem = kept
    return Utilisation(by_workload=values, problem=problem)


def _query(query: str, at: int) -> tuple[dict[str, float], str]:
    """(utilisation by workload id, "") or ({}, why not)."""
    url = f"{settings.DCGM_PROMETHEUS_URL}/api/v1/query"
    try:
        response = httpx.get(
            url,
            params={"query": query, "time": str(at)},
            timeout=float(settings.DCGM_TIMEOUT_SECONDS),
            follow_redirects=False,
        )
    except httpx.HTTPError as exc:
        return {}, f"Prometheus did not answer ({type(exc).__name__}: {exc})"
    try:
        body = response.json()
    except ValueError:
        return {}, f"Prometheus answered HTTP {response.status_code} without JSON"
    if response.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else None
        return {}, f"Prometheus answered HTTP {response.status_code}: {error or 'not a success'}"
    return _by_workload(body.get("data") or {})


def _by_workload(data: dict[str, Any]) -> tuple[dict[str, float], str]:
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        return {}, "Prometheus answered with something other than a vector"
    scale = 100.0 if settings.DCGM_METRIC in RATIO_METRICS else 1.0
    samples: dict[str, list[float]] = defaultdict(list)
    for series in data["result"]:
        try:
            pod = str(series["metric"]["pod"])
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        found = POD_NAME.match(pod)
        if found and math.isfinite(value):
            samples[found.group(1)].append(value * scale)
    return {wid: sum(v) / len(v) for wid, v in samples.items()}, ""


def workload_utilisation(workload: Workload) -> dict[str, Any]:
    """A workload page's figure: its mean utilisation over its latest run (running: so far),
    or None with the reason."""
    if workload.started_at is None:
        return {"percent": None, "problem": "it has not run yet", "window": None}
    end = workload.finished_at or timezone.now()
    found = utilisation_read(
        namespace=workload.project.namespace,
        start=workload.started_at,
        end=end,
        workload=workload.pk,
    )
    percent = found.of(workload.pk)
    problem = found.problem or ("" if percent is not None else "no samples for its pods")
    return {"percent": percent, "problem": problem, "window": end - workload.started_at}


def idle_gpu_hours(
    gpu_hours: dict[Any, float], found: Utilisation
) -> tuple[float | None, float, float | None]:
    """(idle GPU-hours, GPU-hours with a known utilisation, their mean utilisation) over the
    workloads' GPU-hours: each one's hours times the share its GPUs sat idle. None where no
    workload's utilisation is known."""
    idle = known = weighted = 0.0
    for workload_id, hours in gpu_hours.items():
        percent = found.of(workload_id)
        if percent is None or hours <= 0:
            continue
        known += hours
        idle += hours * max(0.0, 1 - percent / 100)
        weighted += hours * percent
    if known == 0:
        return None, 0.0, None
    return idle, known, weighted / known


def dashboard_utilisation(scope: Scope, f: DashboardFilters) -> dict[str, Any]:
    """The dashboard's figures over its range and filters: utilisation by workload (for the
    top-workloads table), the idle GPU-hours and the mean utilisation of the GPU-hours whose
    utilisation is known, the same by project, and why there is none."""
    if scope.project is not None:
        namespace = scope.project.namespace
    else:  # every project's namespace (a short query, however many projects there are)
        namespace = Project(slug="").namespace + ".+"
    found = utilisation_read(namespace=namespace, start=f.start, end=f.end)
    hours: dict[Any, float] = defaultdict(float)
    by_project: dict[str, dict[Any, float]] = defaultdict(lambda: defaultdict(float))
    if found.by_workload:
        days = WorkloadDay.objects.filter(
            day__gte=f.first,
            day__lte=f.last,
            workload__in=workloads(scope, f).filter(pk__in=list(found.by_workload)),
        )
        rows = days.values_list("workload_id", "project__slug", "gpu_seconds")
        for workload_id, slug, seconds in rows:
            hours[str(workload_id)] += seconds / 3600
            by_project[slug][str(workload_id)] += seconds / 3600
    idle, known, percent = idle_gpu_hours(hours, found)
    problem = found.problem or ("" if known else "no utilisation samples for the range's work")
    projects = []
    for slug, its_hours in sorted(by_project.items()):
        p_idle, p_known, p_percent = idle_gpu_hours(its_hours, found)
        if not p_known:
            continue
        projects.append(
            {
                "project": slug,
                "percent": p_percent,
                "idle_gpu_hours": p_idle,
                "known_gpu_hours": p_known,
            }
        )
    return {
        "found": found,
        "idle_gpu_hours": idle,
        "known_gpu_hours": known,
        "percent": percent,
        "projects": projects,
        "problem": problem,
    }
