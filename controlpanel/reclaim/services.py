"""The idle policy at work (the beat task `gpu_idle_check` calls `gpu_idle_check`): every
running workload that holds GPUs has its samples read (one range query per project), its watch
kept (the page's banner and chart read it), and, where its project's policy is on, its owner
warned once its GPUs sat idle for the policy's minutes, then, a grace period later, the
workload acted on as its kind declares (registry: `gpu_idle`): stopped (a notebook keeps its
workspace), stopped or left as the project chooses (jobs), or warned only (apps).

Returns what happened; the task layer sends the notices (`notify`)."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from controlpanel.dashboards.dcgm import Samples, held_gpus
from controlpanel.engine.models import Workload
from controlpanel.engine.registry import kind_of, kinds
from controlpanel.engine.services import workload_stop
from controlpanel.reclaim.models import GpuIdleNotice, GpuIdleWatch, NoticeEvent
from controlpanel.reclaim.policy import Policy, Stretch, points_of, stretch_of

log = logging.getLogger(__name__)
CHART = timedelta(hours=2)  # what the page's chart shows (at least the policy's span)
EVENT = "workload.gpu_idle"


@dataclass
class Checked:
    """What one check did: counts, and the notices to send (their ids)."""

    counts: dict[str, int] = field(
        default_factory=lambda: {"checked": 0, "idle": 0, "warned": 0, "acted": 0, "no_data": 0}
    )
    notices: list[int] = field(default_factory=list)


def gpu_idle_check() -> Checked:
    """Check every running GPU workload (see the module's docstring)."""
    done = Checked()
    if not settings.DCGM_PROMETHEUS_URL:
        return done
    now = timezone.now()
    by_project: dict[Any, list[Workload]] = defaultdict(list)
    for workload in running_gpu_workloads():
        by_project[workload.project].append(workload)
    for project, workloads in by_project.items():
        policy = Policy.of(project)
        span = max(policy.lookback, CHART) if policy.on else CHART
        samples = held_gpus(namespace=project.namespace, start=now - span, end=now)
        for workload in workloads:
            check_one(workload, policy=policy, samples=samples, now=now, done=done)
    return done


def running_gpu_workloads() -> list[Workload]:
    """Every kind's running rows on a GPU flavor."""
    running = {kind.running for kind in kinds()}
    rows = Workload.objects.filter(state__in=running, stop_requested=False, gpu__gt=0)
    rows = rows.exclude(flavor__gpu_model="").select_related("project", "flavor", "owner")
    return [row for row in rows if row.state == kind_of(row).running]


def check_one(
    workload: Workload, *, policy: Policy, samples: Samples, now: datetime, done: Checked
) -> None:
    """One workload: its watch brought up to date, and the policy applied."""
    done.counts["checked"] += 1
    watch = GpuIdleWatch.objects.filter(pk=workload.pk).first()
    if watch is None or watch.run != workload.run:
        GpuIdleWatch.objects.filter(pk=workload.pk).delete()
        watch = GpuIdleWatch(workload=workload, run=workload.run)
    if samples.problem:
        stretch = Stretch(None, None, samples.problem)
    else:
        series = samples.by_workload().get(str(workload.pk), [])
        points = points_of(series, percent=policy.percent)
        if workload.started_at is not None:  # a notebook's pod name is every run's
            points = [p for p in points if p.time >= workload.started_at]
        known = watch.idle_since if watch.checked_at >= now - policy.lookback else None
        stretch = stretch_of(points, percent=policy.percent, now=now, known_since=known)
        watch.points = [[p.at, round(p.busiest, 1)] for p in points if p.time >= now - CHART]
    _see(watch, stretch, now)
    done.counts["no_data"] += bool(stretch.problem)
    done.counts["idle"] += stretch.idle_since is not None
    if policy.on and stretch.idle_since is not None:
        _apply(workload, watch, stretch, policy=policy, now=now, done=done)
    watch.save()


def _see(watch: GpuIdleWatch, stretch: Stretch, now: datetime) -> None:
    """What the samples say, kept; busy again (or no data): any warning is withdrawn."""
    watch.checked_at = now
    watch.problem = stretch.problem
    watch.idle_since = stretch.idle_since
    if stretch.last is not None:
        watch.last_sample_at, watch.busiest = stretch.last.time, stretch.last.busiest
    if stretch.idle_since is None and watch.acted_at is None:
        watch.warned_at = watch.act_at = None
        watch.action = ""


def action_of(workload: Workload, policy: Policy) -> str:
    """What the policy does to this workload after the grace: "stop" or "warn" (its kind
    declares it; a job's is its project's choice)."""
    declared = kind_of(workload).gpu_idle
    return policy.jobs if declared == "choice" else declared


def _apply(
    workload: Workload,
    watch: GpuIdleWatch,
    stretch: Stretch,
    *,
    policy: Policy,
    now: datetime,
    done: Checked,
) -> None:
    assert stretch.idle_since is not None
    idle_for = stretch.idle_for()
    if idle_for < timedelta(minutes=policy.minutes) or watch.acted_at is not None:
        return
    action = action_of(workload, policy)
    if watch.warned_at is None:
        watch.warned_at, watch.action = now, action
        watch.act_at = max(
            stretch.idle_since + timedelta(minutes=policy.minutes + policy.grace),
            now + timedelta(minutes=policy.grace),
        )
        done.notices.append(_notice(workload, watch, policy, NoticeEvent.WARNING, now).pk)
        done.counts["warned"] += 1
    due = watch.act_at is not None and now >= watch.act_at
    if action != "stop" or not due or idle_for < timedelta(minutes=policy.minutes + policy.grace):
        return
    if _stop(workload, reason=stop_reason(policy, idle_for)):
        watch.acted_at, watch.action = now, "stopped"
        done.notices.append(_notice(workload, watch, policy, NoticeEvent.ACTED, now).pk)
        done.counts["acted"] += 1


def stop_reason(policy: Policy, idle_for: timedelta) -> str:
    minutes = int(idle_for.total_seconds() // 60)
    return (
        f"GPU idle for {minutes} min: below {policy.percent} % utilisation "
        "(the project's idle policy)"
    )


def _stop(workload: Workload, *, reason: str) -> bool:
    """Stop it as the panel (its kind's stop: a notebook keeps its workspace)."""
    try:
        with transaction.atomic():
            workload_stop(access=None, user=None, workload=workload, reason=reason)
    except (ValidationError, PermissionDenied):
        return False  # it moved on meanwhile
    return True


def _notice(
    workload: Workload, watch: GpuIdleWatch, policy: Policy, event: str, now: datetime
) -> GpuIdleNotice:
    payload = notice_payload(workload, watch, policy, event)
    return GpuIdleNotice.objects.create(
        project=workload.project,
        workload=workload,
        owner=workload.owner,
        event=event,
        text=notice_text(payload),
        payload=payload,
        created_at=now,
    )


def notice_payload(
    workload: Workload, watch: GpuIdleWatch, policy: Policy, event: str
) -> dict[str, Any]:
    kind = kind_of(workload)
    kwargs = {"slug": workload.project.slug, f"{kind.name}_id": workload.pk}
    return {
        "event": EVENT,
        "state": "stopped" if event == NoticeEvent.ACTED else "warning",
        "project": workload.project.slug,
        "kind": kind.name,
        "id": str(workload.pk),
        "name": workload.name,
        "owner": workload.owner.get_username() if workload.owner else "",
        "threshold_percent": policy.percent,
        "idle_minutes": _idle_minutes(watch),
        "idle_since": watch.idle_since.isoformat() if watch.idle_since else None,
        "action": watch.action,
        "acts_at": watch.act_at.isoformat() if watch.act_at and watch.action == "stop" else None,
        "url": settings.SITE_URL + reverse(f"{kind.name}-detail", kwargs=kwargs),
    }


def _idle_minutes(watch: GpuIdleWatch) -> int:
    if watch.idle_since is None:
        return 0
    seen = watch.last_sample_at or watch.checked_at
    return int((seen - watch.idle_since).total_seconds() // 60)


def notice_text(payload: dict[str, Any]) -> str:
    """The notice's sentence (the e-mail's first line, the page's banner)."""
    what = f"{payload['kind'].capitalize()} {payload['name']}"
    below = (
        f"its GPUs have been below {payload['threshold_percent']} % utilisation for "
        f"{payload['idle_minutes']} min"
    )
    if payload["state"] == "stopped":
        return f"{what} was stopped: {below} (the project's idle policy)."
    if payload["action"] == "stop":
        at = datetime.fromisoformat(payload["acts_at"])
        return (
            f"{what}: {below}. It will be stopped at {at:%H:%M} UTC unless they work again "
            "(the project's idle policy)."
        )
    return f"{what}: {below}. The project's idle policy warns only: stop it if it is done."
