"""Each workload's month (billing/rollup.py) equals the ledger's lines summed, whatever writes
them: recordings, a late correction after the month is locked (an adjustment in the next
month), a month rebuilt, a workload deleted, two runs of one workload recorded at once; and
the drill-down that reads it shows the ledger's figures."""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from controlpanel.billing.models import Line, WorkloadMonth
from controlpanel.billing.rollup import rollup_rebuild
from controlpanel.billing.selectors import invoice_lines
from controlpanel.billing.services import month_rebuild, period_close, period_lock, run_record
from controlpanel.engine.models import JobRun, Workload
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from tests.controlpanel.billing.conftest import at, ran
from tests.controlpanel.billing.test_usage_team import cells

JAN, FEB = date(2025, 1, 1), date(2025, 2, 1)
FIELDS = ("minutes", "unit_minutes", "price_minutes", "adjustments", "lines", "runs")


def ledger(month: date) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The lines billed in `month`, summed by hand per (project, run's workload, flavor)."""
    sums: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0, 0, Decimal(0), 0, 0, set()])
    for line in Line.objects.filter(period=month).select_related("run"):
        row = sums[(line.project_id, line.run.job_id, line.flavor_id)]
        row[0] += line.minutes
        row[1] += line.minutes * line.units
        row[2] += line.minutes * line.units * line.price_per_hour
        row[3] += line.period != line.of_period
        row[4] += 1
        row[5].add(line.run_id)
    return {key: (*row[:5], len(row[5])) for key, row in sums.items()}


def rollup(month: date) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    rows = WorkloadMonth.objects.filter(period=month)
    return {
        (row.project_id, row.workload_id, row.flavor_id): tuple(getattr(row, f) for f in FIELDS)
        for row in rows
    }


def test_recordings_keep_it_equal_to_the_ledger(january: dict[str, Workload]) -> None:
    assert rollup(JAN) == ledger(JAN) and len(ledger(JAN)) == 4
    assert rollup(FEB) == ledger(FEB) and len(ledger(FEB)) == 1  # nb-b's 10 minutes
    train = january["train-a"]
    gpu_rows = rollup(JAN)[(train.project_id, train.pk, train.flavor_id)]
    # 31 started minutes × 2 units at 2.80/h
    assert gpu_rows == (31, 62, Decimal("173.6000"), 0, 1, 1)


def test_a_late_correction_after_the_lock_lands_in_the_next_month(
    january: dict[str, Workload], admin_client: Client
) -> None:
    period_close(month=JAN, now=at("2025-02-02T00:00"))
    period_lock(month=JAN, now=at("2025-02-02T00:00"))
    locked_january = rollup(JAN)
    run = JobRun.objects.get(job=january["train-a"])
    run.finished_at = at("2025-01-10T10:20:20")  # 21 minutes, not 31
    run.save()
    run_record(run_id=run.pk, now=at("2025-02-03T00:00"))
    assert rollup(JAN) == locked_january == ledger(JAN)  # a locked month never changes
    assert rollup(FEB) == ledger(FEB)
    key = (run.project_id, run.job_id, run.flavor_id)
    assert rollup(FEB)[key] == (-10, -20, Decimal("-56.0000"), 1, 1, 1)
    page = admin_client.get("/billing/2025-02/p/alpha/").content.decode()
    assert "train-a" in page and "-0.33" in page  # its workload row: -20 GPU-minutes
    # and a rebuild of February sums the same rows afresh
    month_rebuild(month=FEB, now=at("2025-02-03T00:00"))
    assert rollup(FEB) == ledger(FEB)
    assert rollup(FEB)[key] == (-10, -20, Decimal("-56.0000"), 1, 1, 1)


def test_a_rebuild_from_the_lines_alone_gives_the_same_rows(january: dict[str, Workload]) -> None:
    kept = rollup(JAN)
    WorkloadMonth.objects.filter(period=JAN).update(minutes=0, price_minutes=0)
    assert rollup_rebuild(month=JAN) == 4
    assert rollup(JAN) == kept == ledger(JAN)


def test_a_deleted_workload_moves_to_the_deleted_row(
    january: dict[str, Workload], project: Project, admin_client: Client
) -> None:
    train = january["train-a"]
    before = admin_client.get("/billing/2025-01/p/alpha/").content.decode()
    assert "(workload deleted)" not in before
    Job.objects.get(pk=train.pk).delete()  # as its kind's proxy: what the services delete
    assert not Workload.objects.filter(pk=train.pk).exists()
    assert rollup(JAN) == ledger(JAN)
    assert (project.pk, None, train.flavor_id) in rollup(JAN)
    page = admin_client.get("/billing/2025-01/p/alpha/").content.decode()
    # the users table: its lines go to the owner its deletion kept, no row of no one
    assert "(workload deleted)" not in page and "owner 2 2 " in cells(page, "table-users")
    # its own row, by the name, kind and owner its deletion kept (KeptRun), marked deleted
    assert "train-a deleted job owner 1 " in cells(page, "table-workloads")
    # the invoice (from the lines) and the drill-down (from the rollup) still agree
    invoiced = sum(line["amount"] for line in invoice_lines(month=JAN, project=project))
    assert f"{invoiced:.2f}" in page
    # a recording of the run afterwards (no workload now) keeps it equal
    run = JobRun.objects.get(uid="pod-train-a")
    assert run.job_id is None
    run.finished_at = at("2025-01-10T10:40:00")
    run.save()
    assert rollup(JAN) == ledger(JAN)


@pytest.mark.django_db(transaction=True)
def test_two_runs_of_one_workload_recorded_at_once_both_count(
    project: Project, owner: Any, gpu: Flavor
) -> None:
    """Each thread records on its own connection; both add to the same new row."""
    workload = ran(project, owner, "pair", "job", gpu, 1, at("2025-01-05T00:00"), None)
    second = JobRun.objects.create(
        uid="pod-pair-2", job=workload, project=project, run=2, flavor=gpu, units=1
    )
    first = JobRun.objects.get(uid="pod-pair")
    JobRun.objects.filter(pk=second.pk).update(
        started_at=at("2025-01-06T00:00"), finished_at=at("2025-01-06T01:00")
    )
    JobRun.objects.filter(pk=first.pk).update(finished_at=at("2025-01-05T02:00"))
    WorkloadMonth.objects.all().delete()
    Line.objects.all().delete()
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def record(run_id: int) -> None:
        try:
            start.wait(10)
            run_record(run_id=run_id, now=datetime(2025, 2, 1, tzinfo=UTC), force=True)
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=record, args=(pk,)) for pk in (first.pk, second.pk)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert rollup(JAN) == ledger(JAN)
    minutes, _, _, _, lines, runs = rollup(JAN)[(project.pk, workload.pk, gpu.pk)]
    assert (minutes, lines, runs) == (180, 2, 2)
