"""Reading pod status dicts: container states, times, and why a pod is not running yet."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from deploy import kinds
from deploy.kubernetes.api import Obj
from deploy.types import WorkloadRef

# Waiting reasons that are only a step of a normal start, not something to show as a problem.
STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing", ""})
MAX_REASON = 300


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 API timestamp as an aware datetime."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def newest(objects: Iterable[Obj]) -> Obj | None:
    """The most recently created object (pods of a re-admitted Job, push attempts...)."""
    items = list(objects)
    if not items:
        return None
    return max(items, key=lambda o: (o["metadata"].get("creationTimestamp") or "", _name(o)))


def container_status(pod: Obj, name: str, *, init: bool = False) -> Obj | None:
    """The status of one container (or init container) of `pod`."""
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in (pod.get("status") or {}).get(key) or []:
        if status.get("name") == name:
            return dict(status)
    return None


@dataclass(frozen=True)
class ContainerRun:
    """One container's state reduced to what the panel needs."""

    state: str  # "waiting", "running", "terminated" or "" when not reported yet
    reason: str = ""
    message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None


def container_run(status: Obj | None) -> ContainerRun:
    """A container status as a `ContainerRun`."""
    state = (status or {}).get("state") or {}
    if "terminated" in state:
        done = state["terminated"] or {}
        return ContainerRun(
            "terminated",
            reason=done.get("reason") or "",
            message=done.get("message") or "",
            started_at=parse_time(done.get("startedAt")),
            finished_at=parse_time(done.get("finishedAt")),
            exit_code=done.get("exitCode"),
        )
    if "running" in state:
        return ContainerRun(
            "running", started_at=parse_time((state["running"] or {}).get("startedAt"))
        )
    if "waiting" in state:
        waiting = state["waiting"] or {}
        return ContainerRun(
            "waiting", reason=waiting.get("reason") or "", message=waiting.get("message") or ""
        )
    return ContainerRun("")


def condition(obj: Obj, kind: str) -> Obj | None:
    """The condition of type `kind` (pods and Jobs), if reported."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def is_true(obj: Obj, kind: str) -> bool:
    """Whether the condition `kind` is True."""
    found = condition(obj, kind)
    return bool(found and found.get("status") == "True")


def unscheduled_reason(pod: Obj, events: Iterable[Obj]) -> str | None:
    """The scheduler's explanation when the pod has no node, else None."""
    scheduled = condition(pod, "PodScheduled")
    if (pod.get("spec") or {}).get("nodeName") or (scheduled and scheduled["status"] == "True"):
        return None
    message = (scheduled or {}).get("message") or latest_event(events, "FailedScheduling")
    return clip(message or "waiting for a node")


def waiting_reason(run: ContainerRun, *, what: str) -> str:
    """'ImagePullBackOff: Back-off pulling image ...' or a plain starting sentence."""
    if run.reason in STARTING_REASONS:
        return f"starting {what}"
    return clip(f"{run.reason}: {run.message}" if run.message else run.reason)


def last_line(text: str) -> str:
    """The last non-empty line of a termination message (the run's last words)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return clip(lines[-1]) if lines else ""


def clip(text: str) -> str:
    """Reasons are shown in lists: keep them short."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def latest_event(events: Iterable[Obj], reason: str) -> str | None:
    """The message of the newest event with this reason."""
    matching = [e for e in events if e.get("reason") == reason]
    if not matching:
        return None
    latest = max(matching, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return str(latest.get("message") or "")


def _name(obj: Obj) -> str:
    return str(obj["metadata"].get("name", ""))


def main_component(ref: WorkloadRef) -> str:
    """The component label of the pod that runs the user's process."""
    return kinds.spec(ref.kind).component
