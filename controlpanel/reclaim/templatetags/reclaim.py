"""`{% gpu_idle_card workload %}`: the GPU idle policy on a workload's page (its window and
threshold, what happens after, a warning's banner, a small chart of its busiest GPU). It reads
the watch the check task keeps: no page asks Prometheus for it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils import timezone

from controlpanel.engine.registry import kind_of
from controlpanel.reclaim.models import GpuIdleNotice, GpuIdleWatch, NoticeEvent
from controlpanel.reclaim.policy import Policy
from controlpanel.reclaim.services import action_of

register = template.Library()
WIDTH, HEIGHT = 300, 60  # the chart's drawing box (it scales with the card)


@dataclass(frozen=True)
class Chart:
    """An SVG polyline of the samples (x: time, y: percent, 100 at the top) and the
    threshold's line."""

    points: str
    threshold_y: float
    first: Any
    last: Any


def chart_of(points: list[list[float]], threshold: int) -> Chart | None:
    if len(points) < 2:
        return None
    start, end = points[0][0], points[-1][0]
    span = max(1.0, end - start)
    drawn = " ".join(f"{(at - start) / span * WIDTH:.1f},{_y(value):.1f}" for at, value in points)
    return Chart(
        points=drawn,
        threshold_y=round(_y(threshold), 1),
        first=_time(start),
        last=_time(end),
    )


def _y(percent: float) -> float:
    return HEIGHT - min(100.0, max(0.0, percent)) * HEIGHT / 100


def _time(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


@register.inclusion_tag("reclaim/card.html")
def gpu_idle_card(workload: Any) -> dict[str, Any]:
    """The card's context; empty (nothing drawn) for a workload without GPUs."""
    if not workload.gpu or not workload.flavor.gpu_model:
        return {"shown": False}
    policy = Policy.of(workload.project)
    kind = kind_of(workload)
    watch = GpuIdleWatch.objects.filter(pk=workload.pk, run=workload.run).first()
    live = workload.state == kind.running and watch is not None
    notice = None
    if watch is not None and (watch.warned_at or watch.acted_at):
        events = GpuIdleNotice.objects.filter(workload=workload, created_at__gte=watch.warned_at)
        notice = events.order_by("-created_at").first()
    return {
        "shown": True,
        "policy": policy,
        "noun": kind.name,
        "action": action_of(workload, policy),
        "watch": watch if live else None,
        "banner": notice.text if notice and (live or notice.event == NoticeEvent.ACTED) else "",
        "acted": bool(notice and notice.event == NoticeEvent.ACTED),
        "chart": chart_of(watch.points, policy.percent) if live and watch else None,
        "now": timezone.now(),
    }
