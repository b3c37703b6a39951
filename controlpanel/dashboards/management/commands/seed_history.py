"""Demo history for the dashboards and their benchmark: `seed_history --jobs N --days D
[--project P]`. Every row it makes carries the label `demo=seed_history` (and demo users are
named `demo-*`), so it is never mistaken for real usage; the days are rolled up at the end.

History is what already happened: every workload it makes has ended before now. A "still
running" or "still waiting" row would hold its project's quota and the machine's CPUs for ever
(nothing runs it), and the sweep would try to launch it. It goes into a project of its own
(`history`) unless --project says, and its demo users cannot log in (inactive, no password):
they are not people a local `make run` would have to trust (ajuste.E001)."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from controlpanel.dashboards.rollups import days_rebuild
from controlpanel.engine.models import JobRun, Workload
from controlpanel.engine.registry import kind_of
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Membership, Project, Role

DEMO_LABEL = {"demo": "seed_history"}
# The history is of jobs, with a few notebooks among them: their kinds' declarations
# (registry.py), and how a job's runs end, in words.
JOB, NOTEBOOK = kind_of("job"), kind_of("notebook")
FINAL = [
    ("DONE", 0.78),
    ("FAILED", 0.12),
    ("INTERRUPTED", 0.06),
    ("ERROR", 0.02),
    ("SYNC_FAILED", 0.02),
]
REASONS: dict[str, str] = {
    "DONE": "exit code 0",
    "FAILED": "exit code 1: CUDA error: out of memory",
    "INTERRUPTED": "stopped by its owner",
    "ERROR": "the pod vanished (node lost)",
    "SYNC_FAILED": "pushing /workspace/output failed: connection reset",
}
TEAMS = ["nlp", "vision", "speech", "rl"]
PROJECT = "history"
BATCH = 5000


class Command(BaseCommand):
    help = "Generate realistic job and notebook history (marked demo=seed_history)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, required=True, help="How many workloads.")
        parser.add_argument("--days", type=int, required=True, help="Spread over this many days.")
        parser.add_argument(
            "--project", default=PROJECT, help=f"Project slug (made if missing; {PROJECT})."
        )
        parser.add_argument("--seed", type=int, default=0, help="Random seed (repeatable).")

    def handle(self, *args: Any, jobs: int, days: int, project: str, seed: int, **_: Any) -> None:
        if jobs < 1 or days < 1 or days > 3660:
            raise CommandError("--jobs must be at least 1 and --days from 1 to 3660.")
        target, _made = Project.objects.get_or_create(
            slug=project, defaults={"name": project.title()}
        )
        users = _demo_users(target)
        flavors = list(Flavor.objects.filter(enabled=True))
        if not flavors:
            raise CommandError("No enabled flavor: migrate first (it makes the default ones).")
        rng = random.Random(seed)  # noqa: S311 (demo data, repeatable by its seed)
        now = timezone.now()
        first = now - timedelta(days=days)
        made = 0
        while made < jobs:
            count = min(BATCH, jobs - made)
            workloads, runs = _batch(rng, target, users, flavors, first, now, count)
            Workload.objects.bulk_create(workloads, batch_size=BATCH)
            JobRun.objects.bulk_create(runs, batch_size=BATCH)
            made += count
            self.stdout.write(f"  {made}/{jobs} workloads", ending="\r")
        self.stdout.write("")
        day = first.astimezone(UTC).date()
        span = [day + timedelta(days=n) for n in range((now.date() - day).days + 1)]
        rows = days_rebuild(span, now=now)
        self.stdout.write(
            self.style.SUCCESS(
                f"Made {jobs} demo workloads in {target.slug} over {days} days "
                f"(label demo=seed_history); {rows} rollup rows."
            )
        )


def _demo_users(project: Project) -> list[Any]:
    users = []
    for name in ("alice", "bruno", "chloe", "dmitri", "emma"):
        user, made = get_user_model().objects.get_or_create(
            username=f"demo-{name}", defaults={"is_active": False}
        )
        if made:
            user.set_unusable_password()
            user.save()
        role = Role.MANAGER if name == "alice" else Role.MEMBER
        Membership.objects.get_or_create(project=project, user=user, defaults={"role": role})
        users.append(user)
    return users


def _state(rng: random.Random) -> str:
    pick, total = rng.random(), 0.0
    for state, share in FINAL:
        total += share
        if pick < total:
            return state
    return "DONE"


def _times(
    rng: random.Random, first: datetime, now: datetime
) -> tuple[datetime, datetime, datetime]:
    """When one workload was queued, admitted and ended, all before `now` (drawn again when
    its run would still be going: history holds no quota)."""
    span = (now - first).total_seconds()
    while True:
        queued = first + timedelta(seconds=rng.random() * span)
        admitted = queued + timedelta(seconds=rng.expovariate(1 / 240))
        ended = admitted + timedelta(seconds=min(rng.lognormvariate(7.5, 1.2), 5 * 86400))
        if ended < now:
            return queued, admitted, ended


def _workload(
    rng: random.Random,
    project: Project,
    users: list[Any],
    flavor: Flavor,
    times: tuple[datetime, datetime, datetime],
    notebook: bool,
) -> Workload:
    """One ended workload: a job (its end drawn by FINAL), or a notebook. The draws keep their
    order, so a seed makes the same history."""
    queued, admitted_at, ended_at = times
    state = NOTEBOOK.stopped if notebook else _state(rng)
    finetune = not notebook and rng.random() < 0.3
    return Workload(
        id=uuid.uuid4(),
        kind=NOTEBOOK.name if notebook else JOB.name,
        project=project,
        owner=rng.choice(users),
        name=f"{'nb' if notebook else 'train'}-{rng.randrange(10**6):06d}",
        image="ghcr.io/ajuste/finetune:0.1.0",
        flavor=flavor,
        gpu=rng.choice((1, 1, 1, 2, 4)) if flavor.is_gpu else 1,
        labels=DEMO_LABEL | {"team": rng.choice(TEAMS)},
        preset="finetune" if finetune else "",
        state=state,
        state_reason=REASONS.get(state, ""),
        state_changed_at=ended_at,
        queued_at=queued,
        admitted_at=admitted_at,
        started_at=admitted_at,
        finished_at=ended_at,
        exit_code=0 if state == "DONE" else 1 if state == "FAILED" else None,
        progress={"tokens_per_s": round(rng.uniform(2000, 12000), 1)} if finetune else {},
        created_at=queued,
        last_activity_at=ended_at if notebook else None,
    )


def _batch(
    rng: random.Random,
    project: Project,
    users: list[Any],
    flavors: list[Flavor],
    first: datetime,
    now: datetime,
    count: int,
) -> tuple[list[Workload], list[JobRun]]:
    workloads, runs = [], []
    for _ in range(count):
        notebook = rng.random() < 0.08
        flavor = rng.choice(flavors)
        times = _times(rng, first, now)
        w = _workload(rng, project, users, flavor, times, notebook)
        workloads.append(w)
        runs.append(
            JobRun(
                uid=f"demo-{w.id}",
                job=w,
                project=project,
                run=1,
                flavor=flavor,
                units=w.gpu,
                started_at=w.started_at,
                finished_at=w.finished_at,
                node="demo-node",
            )
        )
    return workloads, runs
