"""Reads every kind's pages and API share: the list filters (state, owner, label, name), a
workload's cost so far and per hour, and its place in the admission queue."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeVar, cast

from django.db.models import Prefetch, QuerySet
from django.db.models.fields.json import KeyTransform
from django.http import Http404
from django.utils import timezone

from controlpanel.billing.rules import billed_minutes, segments
from controlpanel.billing.usage import is_estimated, runs_cost, runs_with_billing
from controlpanel.engine.admission import WAITING_STATES, shares_machine
from controlpanel.engine.models import JobEvent, Workload
from controlpanel.engine.validation import LABEL_RE
from controlpanel.flavors.models import Flavor
from controlpanel.queues.positions import QueuePosition, kueue_places, kueue_position
from controlpanel.queues.selectors import kueue_on

_Jobs = TypeVar("_Jobs", bound=QuerySet[Any])


CENT = Decimal("0.01")


MILLI_CENT = Decimal("0.0001")  # a CPU minute costs fractions of a cent


@dataclass(frozen=True)
class ListFilters:
    """What a kind's list is narrowed to (all optional)."""

    state: str = ""
    owner: str = ""
    label: str = ""
    q: str = ""
    sort: str = "-created"

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> ListFilters:
        """The filters of a query string, read the same way by the page and the API."""
        return cls(
            state=query.get("state", ""),
            owner=query.get("owner", ""),
            label=query.get("label", ""),
            q=query.get("q", "")[:100],
            sort=query.get("sort", "") or "-created",
        )


def list_filters_check(
    *, filters: ListFilters, states: Sequence[str]
) -> tuple[ListFilters, dict[str, str]]:
    """The filters normalised (state upper-cased, one of the kind's `states`) with the bad ones
    blanked, and what was wrong with each bad one (by filter name)."""
    problems: dict[str, str] = {}
    job_state = filters.state.strip().upper()
    if job_state and job_state not in states:
        problems["state"] = f"Unknown state {filters.state!r}: choose one of {', '.join(states)}."
    if filters.label and not _label_filter_ok(filters.label):
        problems["label"] = (
            f"Bad label filter {filters.label!r}: give key or key=value; keys and values are up "
            "to 63 letters, digits, - _ . starting and ending with a letter or digit."
        )
    cleaned = replace(
        filters,
        state="" if "state" in problems else job_state,
        label="" if "label" in problems else filters.label,
    )
    return cleaned, problems


def filtered(rows: _Jobs, filters: ListFilters) -> _Jobs:
    """`rows` narrowed by checked filters (list_filters_check): state, owner, label, name."""
    if filters.state:
        rows = rows.filter(state=filters.state)
    if filters.owner:
        rows = rows.filter(owner__username=filters.owner)
    if filters.label:
        rows = with_label(rows, filters.label)
    if filters.q:
        rows = rows.filter(name__icontains=filters.q)
    return rows


def _label_filter_ok(label: str) -> bool:
    key, _, value = label.partition("=")
    return bool(key) and bool(LABEL_RE.fullmatch(key)) and bool(LABEL_RE.fullmatch(value))


def with_label(jobs: _Jobs, label: str) -> _Jobs:
    """`key` or `key=value`, on PostgreSQL and SQLite alike (SQLite has no JSON `contains`).

    Never build a lookup from user text: `labels__<key>` would let `a__regex` through, so the
    key is an expression's argument (a quoted JSON path), not part of a lookup name. The value
    is compared as a JSON string: KeyTextTransform's `exact` on SQLite parses it as JSON."""
    key, sep, value = label.partition("=")
    if not sep:
        return jobs.filter(labels__has_key=key)
    return cast(
        _Jobs, jobs.alias(label_value=KeyTransform(key, "labels")).filter(label_value=value)
    )


def billed_runs() -> Prefetch[Any]:
    """A workload's runs with what the ledger bills each (one query for a whole list)."""
    return Prefetch("runs", queryset=runs_with_billing())


def hourly_price(*, flavor: Flavor, units: int) -> Decimal | None:
    price = flavor.current_price
    return None if price is None else (price * units).quantize(CENT, ROUND_HALF_UP)


def page_reads(rows: Sequence[Workload]) -> dict[str, Any]:
    """What an API list page's serializer reads of its rows, in four queries whatever their
    number, without Django's prefetch (which cost ~10 ms of CPU a page of 50 jobs, #27):
    `queue_places`, `runs` (`page_runs`) and `history` (each row's events, by row pk)."""
    pks = [row.pk for row in rows]
    history: dict[Any, list[JobEvent]] = {pk: [] for pk in pks}
    for event in JobEvent.objects.filter(job__in=pks):  # no query for an empty page
        history[event.job_id].append(event)
    return {"queue_places": queue_places(rows), "runs": page_runs(rows), "history": history}


def page_runs(rows: Sequence[Workload]) -> dict[Any, list[Any]]:
    """Each row's runs with what the ledger bills each (as `billed_runs`), by row pk, in one
    query; the rows' and the runs' flavors become one instance per flavor, its prices read
    once (one more query), so their costs need no other read."""
    pks = [row.pk for row in rows]
    runs: dict[Any, list[Any]] = {pk: [] for pk in pks}
    found = list(runs_with_billing().prefetch_related(None).filter(job__in=pks))
    for run in found:
        runs[run.job_id].append(run)
    flavor_ids = {row.flavor_id for row in rows} | {run.flavor_id for run in found}
    flavors = Flavor.objects.filter(pk__in=flavor_ids).prefetch_related("prices")
    shared = {flavor.pk: flavor for flavor in flavors}
    for one in [*rows, *found]:
        one.flavor = shared[one.flavor_id]  # type: ignore[attr-defined]
    return runs


def mark_costs(rows: Iterable[Workload]) -> None:
    """Give each row of a list page its current run's cost so far as `list_cost`
    (`job_cost_estimate`), from `page_runs`: the list templates show it."""
    rows = list(rows)
    runs = page_runs(rows)
    for row in rows:
        row.list_cost = job_cost_estimate(job=row, runs=runs[row.pk])  # type: ignore[attr-defined]


def job_cost_estimate(*, job: Workload, runs: Sequence[Any] | None = None) -> Decimal | None:
    """The current run's cost so far: its billing ledger, plus what it ran since its last
    recording while it runs (billing/usage.py). Before the run's row exists (a start not
    observed yet), the billing rule applied to the job's own times. `runs`: the job's runs
    as `page_reads` gives them (default: `job.runs.all()`)."""
    current = [run for run in (job.runs.all() if runs is None else runs) if run.run == job.run]
    cost = runs_cost(current)
    if cost is not None:
        return cost.amount
    return _run_cost(job.flavor, job.gpu, job.started_at, job.finished_at)


def workload_cost_estimate(
    *, workload: Workload, runs: Sequence[Any] | None = None
) -> Decimal | None:
    """What every run of the workload cost so far (a notebook is billed per start), from the
    ledger as `job_cost_estimate`; None while no run has started. Reads `runs` (as
    `page_reads` gives them) or `workload.runs.all()`, so a list prefetching `billed_runs()`
    adds no query a row."""
    cost = runs_cost(workload.runs.all() if runs is None else runs)
    return None if cost is None else cost.amount


def workload_cost_estimated(*, workload: Workload, current: bool = False) -> bool:
    """Whether the cost includes a run closed at its last sighting (its pod vanished)."""
    return any(
        is_estimated(run) for run in workload.runs.all() if not current or run.run == workload.run
    )


def _run_cost(
    flavor: Flavor, units: int, start: datetime | None, end: datetime | None
) -> Decimal | None:
    """The billing rule (billing.rules) applied to one run, up to now while it runs."""
    if start is None or flavor.price_at(start) is None:
        return None
    minutes = billed_minutes(start, end or timezone.now())
    shares = segments(
        start, minutes, [(p.valid_from, p.price_per_hour) for p in flavor.prices.all()]
    )
    per_hour = sum(((seg.price or Decimal(0)) * seg.minutes for seg in shares), Decimal(0))
    return (per_hour * units / 60).quantize(MILLI_CENT, ROUND_HALF_UP)


def queue_position(*, job: Workload) -> int | None:
    """The workload's place among the waiting ones (jobs and notebook starts) in the panel's
    own queue: of its project, or of every project where they share one machine (the local
    backend), as admission counts it."""
    if job.state not in WAITING_STATES or job.admitted_at is not None:
        return None
    ahead = Workload.objects.filter(
        state__in=WAITING_STATES, admitted_at=None, queued_at__lt=job.queued_at
    )
    if not shares_machine():
        ahead = ahead.filter(project=job.project_id)
    return ahead.count() + 1


def queue_place(*, job: Workload) -> QueuePosition | None:
    """Where the workload waits, as pages, the API and the CLI show it: with Kueue, Kueue's
    place (its visibility API, as the periodic task last kept it: queues/positions.py); else
    `queue_position` in the panel's queue."""
    if job.state not in WAITING_STATES:
        return None
    if kueue_on():
        return kueue_position(job)
    place = queue_position(job=job)
    return None if place is None else _panel_place(place, shared=shares_machine())


def _panel_place(place: int, *, shared: bool) -> QueuePosition:
    """A place in the panel's queue: the project's, or (`shared`) the machine's."""
    said = f"position {place} in the queue"
    if shared:
        return QueuePosition(local=None, cluster=place, said=said)
    return QueuePosition(local=place, cluster=None, said=said)


def queue_places(rows: Sequence[Workload]) -> dict[str, QueuePosition]:
    """`queue_place` of each row of a list page, by id, in one read: Kueue's kept places, or
    the panel's queue read once (a row's place: the waiting rows queued before it, of its
    project or of the machine)."""
    waiting = [row for row in rows if row.state in WAITING_STATES]
    if kueue_on() or not waiting:
        return kueue_places(waiting)
    mine = [row for row in waiting if row.admitted_at is None]
    if not mine:
        return {}
    shared = shares_machine()
    queue = Workload.objects.filter(state__in=WAITING_STATES, admitted_at=None)
    if not shared:
        queue = queue.filter(project__in={row.project_id for row in mine})
    times: dict[Any, list[datetime]] = {}
    for project_id, queued_at in queue.values_list("project_id", "queued_at"):
        times.setdefault(None if shared else project_id, []).append(queued_at)
    places = {}
    for row in mine:
        ahead = times.get(None if shared else row.project_id, [])
        mine_at = row.queued_at
        before = len([at for at in ahead if at and mine_at and at < mine_at])
        places[str(row.pk)] = _panel_place(before + 1, shared=shared)
    return places


POSITION_SAID = re.compile(r"; position \d+ in the queue$")


def reason_shown(*, job: Workload, position: QueuePosition | int | None) -> str:
    """The reason without the queue position admission wrote into it, where the page shows
    the live position beside it (once, and never a stale one)."""
    return POSITION_SAID.sub("", job.state_reason) if position else job.state_reason


def listed(model: Any, *, project: Any, defer: tuple[str, ...]) -> QuerySet[Any]:
    """A project's rows of one kind (`model`, its proxy), newest first, with what a list shows
    (flavor prices and runs for the cost so far) read in a fixed number of queries; `defer`
    leaves the big fields the list never shows unread."""
    return (
        model.objects.filter(project=project)
        .select_related("project", "owner", "flavor")
        .prefetch_related("flavor__prices", billed_runs())
        .defer(*defer)
        .order_by("-created_at")
    )


def one_of(rows: QuerySet[Any], workload_id: Any, noun: str) -> Any:
    """The row of `rows` with this id, or 404 (also for malformed ids, and for ids that
    `rows`, one project's, does not hold): "No such <noun>."."""
    try:
        key = uuid.UUID(str(workload_id))
    except ValueError:
        raise Http404(f"No such {noun}.") from None
    found = rows.filter(pk=key).first()
    if found is None:
        raise Http404(f"No such {noun}.")
    return found
