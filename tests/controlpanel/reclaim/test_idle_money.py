"""Idle GPUs in money (issue 31), against a Prometheus stand-in serving DCGM series and the
billing ledger: a scripted 20-minute idle period of a 2-unit run costs 20 × the unit price a
minute × 2, to the cent; half a workload's GPUs idle is half; GPUs no pod held are the
site admins' "unallocated" GPU-hours; pages and CSVs per project and per person, each word
explained; managers and site admins only."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db.models import Sum
from django.test import Client

from controlpanel.billing.services import run_record
from controlpanel.engine.models import JobRun, Workload
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.projects.models import Project
from controlpanel.reclaim.models import IdleCost, IdleHour, UnheldGpus
from controlpanel.reclaim.money import idle_hour_price, idle_money_catch_up
from tests.fixtures.panel import logged_in
from tests.fixtures.prometheus import PrometheusStandIn

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)
DAY = (datetime.now(UTC) - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
TEN, ELEVEN = DAY + timedelta(hours=10), DAY + timedelta(hours=11)
START = TEN + timedelta(minutes=45, seconds=30)  # the runs' start: not on a whole minute
RANGE = f"?range=custom&from={DAY:%Y-%m-%d}&to={DAY:%Y-%m-%d}"


@pytest.fixture
def flavor(db: Any) -> Flavor:
    flavor = Flavor.objects.create(
        name="idle-1-gpu", gpu_model="H100", gpus_per_unit=1, vcpu_per_unit=4, memory_gib_per_unit=8
    )
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=datetime(2025, 1, 1, tzinfo=UTC), price_per_hour=Decimal("3.0000")
    )
    return flavor


def ran(project: Project, owner: Any, flavor: Flavor, name: str, kind: str) -> Workload:
    """A 2-unit run of 40 minutes from START, recorded in the ledger."""
    end = START + 40 * MINUTE
    workload = Workload.objects.create(
        project=project,
        owner=owner,
        flavor=flavor,
        name=name,
        image="img",
        kind=kind,
        gpu=2,
        state="DONE" if kind == "job" else "STOPPED",
        queued_at=START,
        admitted_at=START,
        started_at=START,
        finished_at=end,
    )
    run = JobRun.objects.create(
        uid=f"{workload.pk}-1",
        job=workload,
        project=project,
        run=1,
        flavor=flavor,
        units=2,
        started_at=START,
        finished_at=end,
    )
    run_record(run_id=run.pk, now=end + timedelta(hours=3))
    return workload


def samples(values: list[float]) -> list[tuple[datetime, float]]:
    """One sample a minute, on the minute, from 10:45."""
    return [(TEN + timedelta(minutes=45) + MINUTE * n, v) for n, v in enumerate(values)]


@pytest.fixture
def scripted(
    project: Project, owner: Any, member: Any, flavor: Flavor, dcgm: PrometheusStandIn
) -> dict[str, Workload]:
    """train (owner): both GPUs at 0 % from 10:56 to 11:15, 20 minutes; busy before and
    after. explore (member): one GPU of two at 0 % for 10 minutes. Two GPUs nobody held,
    10:00 to 11:59."""
    ns = project.namespace
    train = ran(project, owner, flavor, "train", "job")
    explore = ran(project, member, flavor, "explore", "notebook")
    busy_idle_busy = [70.0] * 11 + [0.0] * 20 + [70.0] * 10
    for gpu in ("0", "1"):
        dcgm.gpu(
            namespace=ns, pod=f"job-{train.pk}-r1-x7k2p", gpu=gpu, samples=samples(busy_idle_busy)
        )
    dcgm.gpu(namespace=ns, pod=f"nb-{explore.pk}-0", gpu="0", samples=samples([90.0] * 41))
    half = [90.0] * 5 + [3.0] * 10 + [90.0] * 26
    dcgm.gpu(namespace=ns, pod=f"nb-{explore.pk}-0", gpu="1", samples=samples(half))
    every_minute = [(TEN + MINUTE * n, 0.0) for n in range(120)]
    for gpu in ("6", "7"):
        dcgm.gpu(namespace=None, pod=None, gpu=gpu, samples=every_minute)
    return {"train": train, "explore": explore}


def test_a_scripted_20_minute_idle_period_costs_20_times_unit_price_times_units(
    scripted: dict[str, Workload], owner: Any, member: Any
) -> None:
    later = ELEVEN + timedelta(hours=2)
    assert idle_hour_price(hour=TEN, now=later) == 1
    assert idle_hour_price(hour=ELEVEN, now=later) == 1
    train = IdleCost.objects.filter(run__job=scripted["train"]).aggregate(
        cost=Sum("cost"), minutes=Sum("gpu_minutes")
    )
    unit_price_a_minute, units = Decimal("3.0000") / 60, 2
    assert train["cost"].quantize(Decimal("0.01")) == (20 * unit_price_a_minute * units).quantize(
        Decimal("0.01")
    )
    assert train["cost"] == Decimal("2.000000") and train["minutes"] == Decimal("40.0000")
    # The hour boundary splits it: 10:56-10:59 (4 minutes) and 11:00-11:15 (16).
    by_hour = dict(IdleCost.objects.filter(run__job=scripted["train"]).values_list("hour", "cost"))
    assert by_hour == {TEN: Decimal("0.400000"), ELEVEN: Decimal("1.600000")}
    explore = IdleCost.objects.filter(run__job=scripted["explore"]).aggregate(cost=Sum("cost"))
    assert explore["cost"] == Decimal("0.500000")  # half its GPUs, 10 minutes
    assert {(r.owner_id, r.owner_name) for r in IdleCost.objects.all()} == {
        (owner.pk, "owner"),
        (member.pk, "member"),
    }
    unheld = UnheldGpus.objects.aggregate(minutes=Sum("gpu_minutes"))
    assert unheld["minutes"] == 240  # two GPUs, two hours

    # Pricing again gives the same rows.
    before = sorted(IdleCost.objects.values_list("run_id", "hour", "cost"))
    assert idle_hour_price(hour=ELEVEN, now=later) == 1
    assert sorted(IdleCost.objects.values_list("run_id", "hour", "cost")) == before


def test_the_pages_and_csvs_split_allocated_but_idle_from_unallocated(
    scripted: dict[str, Workload],
    owner: Any,
    member: Any,
    outsider: Any,
    admin_user: Any,
    owner_client: Client,
) -> None:
    later = ELEVEN + timedelta(hours=2)
    for hour in (TEN, ELEVEN):
        idle_hour_price(hour=hour, now=later)

    page = owner_client.get(f"/p/alpha/dashboard/idle/{RANGE}")
    assert page.status_code == 200
    body = page.content.decode()
    assert "Allocated but idle" in body and "Unallocated" not in body  # a manager's view
    assert 'data-testid="idle-cost-owner">2.00<' in body
    assert 'data-testid="idle-cost-member">0.50<' in body
    assert 'data-testid="idle-cost">2.50 EUR' in body
    people = owner_client.get(f"/p/alpha/dashboard/idle/people.csv{RANGE}")
    rows = list(csv.DictReader(io.StringIO(people.content.decode())))
    assert [(r["person"], r["idle_cost"], r["idle_gpu_hours"]) for r in rows] == [
        ("owner", "2.0000", "0.6667"),
        ("member", "0.5000", "0.1667"),
    ]
    assert owner_client.get(f"/p/alpha/dashboard/idle/unallocated.csv{RANGE}").status_code == 404

    admin = logged_in(admin_user).get(f"/dashboard/idle/{RANGE}").content.decode()
    assert "Unallocated" in admin and "no workload held" in admin
    assert "4.00" in admin  # GPU-hours no pod held
    unallocated = logged_in(admin_user).get(f"/dashboard/idle/unallocated.csv{RANGE}")
    [row] = list(csv.DictReader(io.StringIO(unallocated.content.decode())))
    assert (row["gpu_model"], row["unallocated_gpu_hours"]) == ("NVIDIA H100 80GB HBM3", "4.0000")
    cheapest = min(
        f.current_price / f.gpus_per_unit
        for f in Flavor.objects.exclude(gpu_model="")
        if f.current_price is not None and "H100" in f.gpu_model
    )
    assert Decimal(row["value_at_list_price"]) == (4 * cheapest).quantize(Decimal("0.0001"))

    assert logged_in(member).get(f"/p/alpha/dashboard/idle/{RANGE}").status_code == 403
    assert logged_in(outsider).get(f"/p/alpha/dashboard/idle/{RANGE}").status_code == 404
    assert logged_in(owner).get(f"/dashboard/idle/{RANGE}").status_code in (403, 404)
    anonymous = Client().get(f"/p/alpha/dashboard/idle/{RANGE}")
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_no_source_or_no_answer_prices_nothing(
    project: Project, owner: Any, flavor: Flavor, dcgm: PrometheusStandIn, settings: Any
) -> None:
    ran(project, owner, flavor, "train", "job")
    dcgm.down = True
    assert idle_hour_price(hour=TEN, now=ELEVEN + timedelta(hours=2)) == 0
    assert not IdleHour.objects.exists() and not IdleCost.objects.exists()
    settings.DCGM_PROMETHEUS_URL = ""
    assert idle_money_catch_up(now=ELEVEN + timedelta(hours=2)) == 0
    assert not IdleCost.objects.exists()
    page = logged_in(owner).get(f"/p/alpha/dashboard/idle/{RANGE}").content.decode()
    assert "no DCGM source configured (DCGM_PROMETHEUS_URL): nothing is priced" in page
