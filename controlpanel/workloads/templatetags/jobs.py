from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from training.protocol import Snapshot

register = template.Library()

STATE_CLASSES = {
    "DONE": "badge-ok",
    "RUNNING": "badge-info",
    "FAILED": "badge-err",
    "ERROR": "badge-err",
    "SYNC_FAILED": "badge-err",
    "INTERRUPTED": "badge-muted",
    "TIMEOUT": "badge-warn",
    "QUEUED": "badge-muted",
    "PENDING": "badge-warn",
    "INITIALIZING": "badge-warn",
    "INTERRUPTING": "badge-warn",
    "FINALIZING": "badge-info",
    # notebooks
    "STARTING": "badge-warn",
    "STOPPING": "badge-warn",
    "STOPPED": "badge-muted",
    "DELETING": "badge-warn",
}


@register.filter
def state_class(state: str) -> str:
    return STATE_CLASSES.get(state, "")


def _finite(value: Any) -> float | None:
    """A finite number for display (a duration, a chart point), else None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


@register.filter
def seconds(value: Any) -> str:
    """A number of seconds as `1 h 02 min`, `3 min 04 s` or `12 s`; `—` when it is none."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    number = _finite(value)
    if number is None:
        return "—"
    hours, rest = divmod(max(int(number), 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


@register.simple_tag
def run_time(started: datetime | None, finished: datetime | None) -> str:
    if started is None:
        return "—"
    return seconds(((finished or timezone.now()) - started).total_seconds())


@register.simple_tag
def volume_link(project_slug: str, text: str) -> str:
    """The bucket browser at a volume's prefix (the place its results land)."""
    from urllib.parse import urlencode

    from django.urls import reverse

    from storage.volumes import VolumeSpecError, parse_volume_spec

    try:
        spec = parse_volume_spec(text)
    except VolumeSpecError:
        return ""
    url = reverse(
        "bucket-browse", kwargs={"slug": project_slug, "datastore": spec.alias, "name": spec.bucket}
    )
    return url + (f"?{urlencode({'prefix': spec.prefix + '/'})}" if spec.prefix else "")


@register.filter
def job_cost(job: Any) -> str:
    from controlpanel.workloads.selectors import job_cost_estimate

    cost = job_cost_estimate(job=job)
    return "—" if cost is None else f"{cost:.2f}" if cost >= 1 else f"{cost:.4f}"


@register.filter
def percent(progress: Any) -> int:
    """How far the steps went, 0 to 100, of a snapshot or its stored JSON (the protocol checks
    the numbers: training/protocol.py)."""
    snapshot = progress if isinstance(progress, Snapshot) else Snapshot.from_json(progress)
    return snapshot.percent


def _curve_points(curve: Any) -> list[tuple[float, float]]:
    """The usable [step, loss] pairs of a stored curve (others are skipped, not fatal)."""
    points = []
    for point in curve if isinstance(curve, list) else []:
        if isinstance(point, list | tuple) and len(point) == 2:
            x, y = _finite(point[0]), _finite(point[1])
            if x is not None and y is not None:
                points.append((x, y))
    return points


@register.simple_tag
def loss_chart(curve: Any, width: int = 600, height: int = 160) -> SafeString:
    """The loss curve as inline SVG (markup, not script: fine under the strict CSP)."""
    points = _curve_points(curve)
    if len(points) < 2:
        return mark_safe("")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    span_x, span_y = (x1 - x0) or 1.0, (y1 - y0) or 1.0
    pad = 8
    coords = " ".join(
        f"{pad + (x - x0) / span_x * (width - 2 * pad):.1f},"
        f"{height - pad - (y - y0) / span_y * (height - 2 * pad):.1f}"
        for x, y in points
    )
    return format_html(
        '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="Loss from {} to {}">'
        '<polyline fill="none" stroke="currentColor" stroke-width="2" points="{}"/>'
        '<text x="{}" y="14" class="chart-label">{}</text>'
        '<text x="{}" y="{}" class="chart-label">{}</text></svg>',
        width,
        height,
        f"{ys[0]:.3f}",
        f"{ys[-1]:.3f}",
        coords,
        pad,
        f"{y1:.3f}",
        pad,
        height - 2,
        f"{y0:.3f} (step {int(x1)})",
    )
