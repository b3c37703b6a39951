"""GPU utilisation over time from DCGM (DCGM_PROMETHEUS_URL), one value a minute per GPU:
Prometheus's range query API (`/api/v1/query_range`), as the idle policy (controlpanel/reclaim)
and idle money read it. utilisation.py reads means over a window for the pages; this reads the
series themselves, in the tasks only (a page never waits on Prometheus for these).

Two questions are asked, each in one query:
- each GPU a workload's pods hold, by namespace, pod and GPU (`max by`, so a series with more
  labels than these counts once), mapped to its workload by the id in the pod's name;
- the GPUs no pod holds, counted by model (the exporter labels a GPU with the pod that holds
  it; an unheld one has no `pod` label, which `pod=""` matches).

A failure is a sentence (`problem`), never an empty answer taken for "idle"."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from django.conf import settings

from controlpanel.dashboards.utilisation import NO_SOURCE, POD_NAME, RATIO_METRICS

STEP_S = 60  # one value a minute: a billed minute holds exactly one evaluation
# Prometheus refuses a range of more than 11,000 points per series.
MAX_POINTS = 11_000


@dataclass(frozen=True)
class GpuSeries:
    """One GPU of one pod of a workload: its utilisation (percent) at each evaluation time
    (epoch seconds) where Prometheus had a sample."""

    workload: str
    namespace: str
    pod: str
    gpu: str
    points: dict[int, float]


@dataclass(frozen=True)
class Samples:
    """What one range query found, or why nothing (`problem`)."""

    series: list[GpuSeries] = field(default_factory=list)
    problem: str = ""

    def by_workload(self) -> dict[str, list[GpuSeries]]:
        found: dict[str, list[GpuSeries]] = defaultdict(list)
        for one in self.series:
            found[one.workload].append(one)
        return dict(found)


def held_gpus(*, namespace: str, start: datetime, end: datetime) -> Samples:
    """Each GPU held by a workload's pod in the namespaces `namespace` matches (a regular
    expression of DNS labels: nothing in it needs escaping), every STEP_S from `start` to
    `end`."""
    selector = f'namespace=~"{namespace}",pod=~"(job|nb|app)-.*"'
    query = f"max by (namespace, pod, gpu) ({settings.DCGM_METRIC}{{{selector}}})"
    result, problem = range_query(query, start=start, end=end)
    scale = _scale()
    series = []
    for item in result:
        labels = item.get("metric") or {}
        found = POD_NAME.match(str(labels.get("pod", "")))
        if not found:
            continue
        series.append(
            GpuSeries(
                workload=found.group(1),
                namespace=str(labels.get("namespace", "")),
                pod=str(labels["pod"]),
                gpu=str(labels.get("gpu", "")),
                points={t: v * scale for t, v in _points(item)},
            )
        )
    return Samples(series=series, problem=problem)


def unheld_gpus(*, start: datetime, end: datetime) -> tuple[dict[str, dict[int, int]], str]:
    """GPUs no pod held, by GPU model: {model: {time: count}}, and why nothing ("" when
    Prometheus answered)."""
    query = f'count by (modelName) ({settings.DCGM_METRIC}{{pod=""}})'
    result, problem = range_query(query, start=start, end=end)
    counts: dict[str, dict[int, int]] = {}
    for item in result:
        model = str((item.get("metric") or {}).get("modelName") or "unknown")
        counts[model] = {t: int(v) for t, v in _points(item)}
    return counts, problem


def range_query(query: str, *, start: datetime, end: datetime) -> tuple[list[dict[str, Any]], str]:
    """The matrix a range query answers (evaluated at `start` + k × STEP_S up to `end`), or
    ([], why not)."""
    if not settings.DCGM_PROMETHEUS_URL:
        return [], NO_SOURCE
    first, last = int(start.timestamp()), int(end.timestamp())
    if last < first:
        return [], ""
    if (last - first) // STEP_S + 1 > MAX_POINTS:
        raise ValueError(f"a range of more than {MAX_POINTS} points was asked")
    form = {"query": query, "start": str(first), "end": str(last), "step": f"{STEP_S}s"}
    try:
        response = httpx.post(
            f"{settings.DCGM_PROMETHEUS_URL}/api/v1/query_range",
            data=form,
            timeout=float(settings.DCGM_TIMEOUT_SECONDS),
            follow_redirects=False,
        )
        body = response.json()
    except httpx.HTTPError as exc:
        return [], f"Prometheus did not answer ({type(exc).__name__}: {exc})"
    except ValueError:
        return [], f"Prometheus answered HTTP {response.status_code} without JSON"
    if response.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else None
        return [], f"Prometheus answered HTTP {response.status_code}: {error or 'not a success'}"
    data = body.get("data") or {}
    if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        return [], "Prometheus answered with something other than a matrix"
    return [item for item in data["result"] if isinstance(item, dict)], ""


def _points(item: dict[str, Any]) -> list[tuple[int, float]]:
    """A series' (time, value) pairs that are numbers (a malformed pair is left out)."""
    found = []
    for pair in item.get("values") or []:
        try:
            at, value = int(float(pair[0])), float(pair[1])
        except (IndexError, TypeError, ValueError):
            continue
        if math.isfinite(value):
            found.append((at, value))
    return found


def _scale() -> float:
    return 100.0 if settings.DCGM_METRIC in RATIO_METRICS else 1.0
