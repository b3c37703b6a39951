"""When someone leaves, their work stops (issue 25): a member removed from a project, or an
account deactivated, no longer runs anything there. Their queued jobs never launch (with the
`rw`/`rwd` volumes they were given), their notebooks stop (rw volumes pushed, workspace kept),
their apps stop serving (their address kept); a manager may start any of it again, as theirs.
Each stop is the engine's own (workload_stop), with the reason in the workload's history.

Or, when a manager removes a member (or a site admin deactivates an account, project by
project), their work is handed over to another member of the project instead
(`leaver_work_hand_over`): every job, notebook, app and sweep they own there becomes
that member's, audited, and keeps its state (a running notebook keeps running, now its new
owner's to open, stop or delete; the leaver is refused with the rest of the project)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.core.exceptions import ValidationError

from controlpanel import audit
from controlpanel.engine.models import Workload
from controlpanel.engine.registry import kind_of
from controlpanel.engine.services import workload_stop
from controlpanel.projects.models import Membership, Project

# How a count of each kind reads ("3 notebooks, 2 apps").
NOUNS = {
    "job": ("job", "jobs"),
    "notebook": ("notebook", "notebooks"),
    "app": ("app", "apps"),
    "sweep": ("sweep", "sweeps"),
}


def _sweeps() -> Any:
    """The sweeps' model: a sweep (not a workload kind) launches its trials as its owner's
    jobs, so it goes with them; imported here only (sweeps build on the engine)."""
    from controlpanel.sweeps.models import Sweep

    return Sweep


def leaver_work(*, user: Any, project: Project | None = None) -> list[Workload]:
    """What `user` owns that still runs or waits (in `project`, or anywhere)."""
    rows = Workload.objects.filter(owner=user, stop_requested=False).select_related("project")
    if project is not None:
        rows = rows.filter(project=project)
    return [w for w in rows.order_by("created_at") if w.state in kind_of(w).stoppable]


def leaver_work_stop(*, user: Any, reason: str, project: Project | None = None) -> list[Workload]:
    """Stop what `user` owns (in `project`, or anywhere): the workloads stopped."""
    return [
        workload_stop(access=None, user=None, workload=workload, reason=reason)
        for workload in leaver_work(user=user, project=project)
    ]


def owned_counts(*, project: Project) -> dict[int, Counter[str]]:
    """Per owner's id, how many workloads of each kind they own in `project` (any state)."""
    counts: dict[int, Counter[str]] = {}
    rows = Workload.objects.filter(project=project).values_list("owner_id", "kind")
    for owner_id, kind in rows:
        counts.setdefault(owner_id, Counter())[kind] += 1
    for owner_id in _sweeps().objects.filter(project=project).values_list("owner_id", flat=True):
        counts.setdefault(owner_id, Counter())["sweep"] += 1
    return counts


def owned_counts_of(*, user: Any) -> dict[int, Counter[str]]:
    """Per project's id, how many workloads of each kind `user` owns there (any state), sweeps
    included: what a deactivation hands over or stops, project by project."""
    counts: dict[int, Counter[str]] = {}
    for project_id, kind in Workload.objects.filter(owner=user).values_list("project_id", "kind"):
        counts.setdefault(project_id, Counter())[kind] += 1
    for project_id in _sweeps().objects.filter(owner=user).values_list("project_id", flat=True):
        counts.setdefault(project_id, Counter())["sweep"] += 1
    return counts


def owned_text(counts: Counter[str]) -> str:
    """`3 notebooks, 2 apps` (kinds in NOUNS' order); "" for nothing."""
    parts = []
    for kind, (one, many) in NOUNS.items():
        if counts.get(kind):
            parts.append(f"{counts[kind]} {one if counts[kind] == 1 else many}")
    return ", ".join(parts)


def hand_over_target(*, project: Project, leaver: Any, username: str) -> Any:
    """The active member `username` of `project` (not the leaver) who takes the work; else a
    ValidationError under `hand_over_to` that says why."""
    membership = (
        Membership.objects.select_related("user")
        .filter(project=project, user__username=username, user__is_active=True)
        .first()
    )
    if membership is None:
        raise ValidationError(
            {"hand_over_to": f"{username} is not an active member of {project.name}."}
        )
    if membership.user_id == leaver.pk:
        raise ValidationError({"hand_over_to": "Hand the work over to someone who stays."})
    return membership.user


def leaver_work_hand_over(*, project: Project, leaver: Any, to: Any, by: Any) -> list[Workload]:
    """Make `to` the owner of everything `leaver` owns in `project` (the caller checked that
    `by` manages it and that `to` is a member: hand_over_target); audited as one event (`by`
    None: the request's signed-in user)."""
    rows = list(
        Workload.objects.select_for_update().filter(project=project, owner=leaver).order_by("pk")
    )
    sweeps = _sweeps().objects.filter(project=project, owner=leaver).update(owner=to)
    if not rows and not sweeps:
        return rows
    Workload.objects.filter(pk__in=[w.pk for w in rows]).update(owner=to)
    counts = Counter(w.kind for w in rows) + Counter({"sweep": sweeps})
    audit.record(
        "member.hand_over",
        actor=by,
        project=project,
        target=to,
        leaver=leaver.get_username(),
        to=to.get_username(),
        what=owned_text(counts),
        workloads=[str(w.pk) for w in rows[:50]],
    )
    for workload in rows:
        workload.owner = to
    return rows
