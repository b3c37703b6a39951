"""The template filters of every kind's pages (and the dashboards'): state badges, durations,
costs, progress, the loss chart's data, a volume's bucket link, a workload's page, the buttons
its state takes and where they post. (Named `jobs` for the templates that load it since jobs
were the only kind.)"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django import template
from django.urls import reverse
from django.utils import timezone

from controlpanel.engine.registry import kind_of, kinds
from storage.volumes import VolumeSpecError, parse_volume_spec
from training.snapshot import Snapshot

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
    try:
        spec = parse_volume_spec(text)
    except VolumeSpecError:
        return ""
    url = reverse(
        "bucket-browse", kwargs={"slug": project_slug, "datastore": spec.alias, "name": spec.bucket}
    )
    return url + (f"?{urlencode({'prefix': spec.prefix + '/'})}" if spec.prefix else "")


@register.filter
def workload_url(row: Any) -> str:
    """The page of a workload (a row or a dict with its `kind`, `project` slug and `id`): its
    kind's `<kind>-detail` route; "" for a kind nobody registered any more."""
    get = row.get if isinstance(row, dict) else lambda name: getattr(row, name, None)
    kind, project = get("kind"), get("project")
    slug = getattr(project, "slug", project)
    if not kind or kind not in {spec.name for spec in kinds()}:
        return ""
    return reverse(f"{kind}-detail", kwargs={"slug": slug, f"{kind}_id": get("id")})


@register.filter
def takes(workload: Any, action: str) -> bool:
    """Whether the workload's state takes a `stop` or a `start` (its kind's stoppable and
    startable states), for its page's buttons."""
    spec = kind_of(workload)
    return workload.state in {"stop": spec.stoppable, "start": spec.startable}[action]


@register.simple_tag
def action_url(project_slug: str, workload: Any, action: str) -> str:
    """Where the workload's `action` button posts: its kind's `<kind>-action` route."""
    name = kind_of(workload).name
    kwargs = {"slug": project_slug, f"{name}_id": workload.pk, "action": action}
    return reverse(f"{name}-action", kwargs=kwargs)


@register.filter
def cost_short(cost: Any) -> str:
    """A cost in a list's column (`list_cost`: selectors.mark_costs): cents from 1 up, four
    decimals below, a dash while there is none."""
    return "—" if cost is None else f"{cost:.2f}" if cost >= 1 else f"{cost:.4f}"


@register.filter
def percent(progress: Any) -> int:
    """How far the steps went, 0 to 100, of a snapshot or its stored JSON (the protocol checks
    the numbers: training/protocol.py)."""
    snapshot = progress if isinstance(progress, Snapshot) else Snapshot.from_json(progress)
    return snapshot.percent


def curve_data(curve: Any) -> dict[str, list[Any]]:
    """The usable points of a stored curve ([step, loss] or [step, loss, tokens/s, learning
    rate]) as columns; a point without a finite step and loss is skipped, not fatal."""
    data: dict[str, list[Any]] = {"steps": [], "loss": [], "tokens_per_s": [], "learning_rate": []}
    for point in curve if isinstance(curve, list) else []:
        if not isinstance(point, list | tuple) or not 2 <= len(point) <= 4:
            continue
        x, y = _finite(point[0]), _finite(point[1])
        if x is None or y is None:
            continue
        extra = [*point[2:], None, None][:2]
        data["steps"].append(int(x))
        data["loss"].append(y)
        data["tokens_per_s"].append(_finite(extra[0]))
        data["learning_rate"].append(_finite(extra[1]))
    return data


@register.inclusion_tag("jobs/loss_chart.html")
def loss_chart(curve: Any, element_id: str = "loss-curve") -> dict[str, Any]:
    """The training curve drawn by Chart.js (static/js/charts.js) from JSON data, every logged
    step, with tokens/s and the learning rate on demand, and the same numbers as a table."""
    data = curve_data(curve)
    rows = list(
        zip(data["steps"], data["loss"], data["tokens_per_s"], data["learning_rate"], strict=True)
    )
    return {
        "data": data,
        "data_json": json.dumps(data),
        "rows": rows,
        "element_id": element_id,
        "shown": len(rows) >= 2,
    }
