"""An API list page reads its rows' runs, events and flavors in a few queries whatever their
number (engine/selectors.py `page_reads`, #27: the job list was most of the web's CPU under
`make run`'s probe), and each row of the list is the row read alone: its cost from its own
runs at its own flavor's prices, its own history, its place in the queue."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.engine.models import JobEvent, JobRun
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.controlpanel.jobs.test_log_view import make_job
from tests.controlpanel.notebooks.test_notebook_pages import make_notebook

FLAVORS = ("ai1-1-cpu", "h100-1-gpu")


def _rows(project: Project, owner: Any, count: int, kind: str) -> None:
    """`count` workloads of `kind` over two flavors (different prices), each with its own
    runs (the current one open or closed, an older one) and its own events; every other one
    waits in the queue."""
    now = timezone.now()
    for n in range(count):
        flavor = Flavor.objects.get(name=FLAVORS[n % 2])
        started = now - timedelta(minutes=10 + n)
        fields = {"flavor": flavor, "gpu": 1 + n % 2, "run": 2, "started_at": started}
        if n % 3 == 2:
            fields |= {"state": "QUEUED", "queued_at": now - timedelta(seconds=n), "run": 1}
            fields |= {"started_at": None}
        if kind == "job":
            row = make_job(project, owner, (), name=f"job-{n}", **fields)
        else:
            row = make_notebook(project, owner, name=f"nb-{n}", **fields)
        for run in range(1, fields["run"] + (0 if fields["started_at"] is None else 1)):
            JobRun.objects.create(
                uid=f"{row.pk}-{run}",
                job=row,
                project=project,
                run=run,
                flavor=flavor,
                units=row.gpu,
                started_at=started - timedelta(minutes=5 * (2 - run)),
                finished_at=None if run == 2 and n % 2 else started + timedelta(minutes=run + n),
            )
        for state in ("QUEUED", "STARTING", "RUNNING")[: 1 + n % 3]:
            JobEvent.objects.create(
                job=row, run=fields["run"], state=state, reason=f"made {n} {state}"
            )


@pytest.mark.parametrize(("kind", "path"), [("job", "jobs"), ("notebook", "notebooks")])
def test_a_list_page_costs_the_same_queries_for_3_rows_as_for_12(
    owner_api: APIClient, project: Project, owner: Any, kind: str, path: str
) -> None:
    _rows(project, owner, 3, kind)
    owner_api.get(f"/api/v1/{path}/?project=alpha")  # the token's first use writes its time
    with CaptureQueriesContext(connection) as few:
        assert owner_api.get(f"/api/v1/{path}/?project=alpha").json()["count"] == 3
    _rows(project, owner, 9, kind)
    with CaptureQueriesContext(connection) as many:
        assert owner_api.get(f"/api/v1/{path}/?project=alpha").json()["count"] == 12
    assert len(many.captured_queries) == len(few.captured_queries) <= 12, [
        q["sql"][:120] for q in many.captured_queries
    ]


@pytest.mark.parametrize(("kind", "path"), [("job", "jobs"), ("notebook", "notebooks")])
def test_each_row_of_a_list_is_the_row_read_alone(
    owner_api: APIClient, project: Project, owner: Any, kind: str, path: str
) -> None:
    FlavorPrice.objects.create(
        flavor=Flavor.objects.get(name="h100-1-gpu"),
        valid_from=timezone.now() - timedelta(minutes=12),
        price_per_hour=Decimal("90"),
    )
    _rows(project, owner, 8, kind)
    listed = owner_api.get(f"/api/v1/{path}/?project=alpha&limit=5&offset=2").json()["results"]
    assert len(listed) == 5
    for row in listed:
        alone = owner_api.get(f"/api/v1/{path}/{row['id']}/?project=alpha").json()
        assert row == alone
    # Not vacuous: rows of both flavors with a cost, rows with no cost yet, waiting rows with a
    # place, and histories of different lengths.
    assert {row["flavor"] for row in listed} == set(FLAVORS)
    costs = [row["cost"] for row in listed]
    assert None in costs and len({cost for cost in costs if cost is not None}) >= 3
    assert any(row["queue_position"] for row in listed)
    assert len({len(row["history"]) for row in listed}) == 3
    for row in listed:  # its own events: those made for it, and no other row's
        made = {e["reason"].split()[1] for e in row["history"] if e["reason"].startswith("made")}
        assert made == {row["name"].split("-")[1]}


def test_a_list_row_without_runs_costs_what_its_own_times_say(
    owner_api: APIClient, project: Project, owner: Any
) -> None:
    """A start not observed yet (no run row): the billing rule on the job's own times, at its
    own flavor's price, in the list as alone."""
    started = timezone.now() - timedelta(minutes=4)
    job = make_job(project, owner, (), flavor=Flavor.objects.get(name="h100-1-gpu"),
                   state=JobState.RUNNING, started_at=started)  # fmt: skip
    [row] = owner_api.get("/api/v1/jobs/?project=alpha").json()["results"]
    assert row["cost"] is not None and Decimal(row["cost"]) > 0
    assert row == owner_api.get(f"/api/v1/jobs/{job.pk}/?project=alpha").json()


def _page_costs(html: str) -> dict[str, str]:
    """The job list page's cost column, by job id."""
    rows = re.findall(r'<tr>\s*<td><a href="/p/alpha/jobs/([0-9a-f-]+)/">.*?</tr>', html, re.S)
    cells = re.findall(r'<td class="num">([^<]*)</td>\s*</tr>', html)
    return dict(zip(rows, cells, strict=True))


def test_the_job_list_page_shows_each_rows_own_cost_in_the_same_queries_for_3_rows_as_12(
    owner_client: Client, owner_api: APIClient, project: Project, owner: Any
) -> None:
    FlavorPrice.objects.create(
        flavor=Flavor.objects.get(name="h100-1-gpu"),
        valid_from=timezone.now() - timedelta(minutes=12),
        price_per_hour=Decimal("90"),
    )
    _rows(project, owner, 3, "job")
    owner_client.get("/p/alpha/jobs/")
    with CaptureQueriesContext(connection) as few:
        owner_client.get("/p/alpha/jobs/")
    _rows(project, owner, 9, "job")
    with CaptureQueriesContext(connection) as many:
        html = owner_client.get("/p/alpha/jobs/").content.decode()
    assert len(many.captured_queries) == len(few.captured_queries)
    shown = _page_costs(html)
    api = owner_api.get("/api/v1/jobs/?project=alpha").json()["results"]
    assert len(shown) == len(api) == 12
    for job in api:
        cost = job["cost"]
        text = (
            "—"
            if cost is None
            else f"{Decimal(cost):.2f}"
            if Decimal(cost) >= 1
            else f"{Decimal(cost):.4f}"
        )
        assert shown[job["id"]] == text, job["name"]
    assert len(set(shown.values())) >= 4  # dashes and different costs: not vacuous
