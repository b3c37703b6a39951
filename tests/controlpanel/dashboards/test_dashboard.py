"""The project dashboard against independent counts over fixtures: GPU-hours and cost of the
range (minute by minute, as billing counts them), ends by state, success rate, queue waits,
what waits now and where, idle notebooks, failures, top workloads by cost; range and filters
(user, flavor, label); CSV exports; who may open it."""

from __future__ import annotations

import csv
import importlib
import io
import statistics
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from controlpanel.dashboards.rollups import bucket_middle, days_rebuild, wait_bucket
from controlpanel.engine.models import JobRun, Kind, Workload
from controlpanel.engine.selectors import queue_position
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.projects.models import Project, Role
from tests.fixtures.panel import UserFactory, add_member, logged_in

NOW = datetime(2025, 3, 20, 15, 30, 17, tzinfo=UTC)
TODAY = NOW.date()


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> datetime:
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    return NOW


@pytest.fixture
def gpu_flavor(db: Any) -> Flavor:
    flavor = Flavor.objects.create(
        name="test-2-gpu", gpu_model="H100", gpus_per_unit=2, vcpu_per_unit=4, memory_gib_per_unit=8
    )
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=datetime(2025, 1, 1, tzinfo=UTC), price_per_hour=Decimal("3")
    )
    # A price change inside the range: minutes after it cost more.
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=NOW - timedelta(days=2, hours=5), price_per_hour=Decimal("4.5")
    )
    return flavor


@pytest.fixture
def cpu_flavor(db: Any) -> Flavor:
    flavor = Flavor.objects.create(
        name="test-cpu", gpus_per_unit=0, vcpu_per_unit=2, memory_gib_per_unit=4
    )
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=datetime(2025, 1, 1, tzinfo=UTC), price_per_hour=Decimal("0.1")
    )
    return flavor


def make(project: Project, owner: Any, flavor: Flavor, **fields: Any) -> Workload:
    runs = fields.pop("runs", [])
    defaults = {"name": "w", "image": "img", "gpu": 1, "kind": Kind.JOB}
    workload = Workload.objects.create(
        project=project, owner=owner, flavor=flavor, **(defaults | fields)
    )
    for n, (start, end) in enumerate(runs, start=1):
        JobRun.objects.create(
            uid=f"{workload.pk}-{n}",
            job=workload,
            project=project,
            run=n,
            flavor=flavor,
            units=workload.gpu,
            started_at=start,
            finished_at=end,
        )
    return workload


@pytest.fixture
def history(
    frozen: datetime,
    project: Project,
    other_project: Project,
    owner: Any,
    member: Any,
    gpu_flavor: Flavor,
    cpu_flavor: Flavor,
) -> dict[str, Any]:
    h = NOW - timedelta(hours=1)
    items = {
        # Before the 7-day range, partly inside it.
        "old": make(
            project,
            owner,
            gpu_flavor,
            name="old",
            state="DONE",
            gpu=2,
            runs=[
                (NOW - timedelta(days=7, hours=3), NOW - timedelta(days=6, hours=10, seconds=13))
            ],
            queued_at=NOW - timedelta(days=8),
            admitted_at=NOW - timedelta(days=7, hours=3),
            finished_at=NOW - timedelta(days=6, hours=10),
            labels={"team": "nlp"},
        ),
        "done": make(
            project,
            member,
            gpu_flavor,
            name="done",
            state="DONE",
            runs=[
                (
                    NOW - timedelta(days=3, minutes=7, seconds=30),
                    NOW - timedelta(days=1, hours=2, seconds=1),
                )
            ],
            queued_at=NOW - timedelta(days=3, minutes=20),
            admitted_at=NOW - timedelta(days=3, minutes=8),
            finished_at=NOW - timedelta(days=1, hours=2),
            labels={"team": "vision"},
        ),
        "failed": make(
            project,
            member,
            cpu_flavor,
            name="failed",
            state="FAILED",
            state_reason="exit code 1: CUDA error",
            exit_code=1,
            runs=[(h - timedelta(minutes=40, seconds=5), h)],
            queued_at=h - timedelta(hours=2),
            admitted_at=h - timedelta(minutes=41),
            finished_at=h,
            labels={"team": "nlp"},
        ),
        "running": make(
            project,
            owner,
            gpu_flavor,
            name="running",
            state="RUNNING",
            gpu=3,
            runs=[(NOW - timedelta(hours=5, seconds=42), None)],
            queued_at=NOW - timedelta(hours=5, minutes=3),
            admitted_at=NOW - timedelta(hours=5, minutes=1),
        ),
        "wait1": make(
            project,
            owner,
            gpu_flavor,
            name="wait one",
            state="QUEUED",
            state_reason="over the project's GPU quota: 6 of 8 GPUs in use, needs 4",
            queued_at=NOW - timedelta(minutes=30),
        ),
        "wait2": make(
            project,
            member,
            cpu_flavor,
            name="<b>wait two</b>",
            state="QUEUED",
            state_reason="waiting behind 1",
            queued_at=NOW - timedelta(minutes=10),
        ),
        "notebook": make(
            project,
            member,
            cpu_flavor,
            name="nb",
            kind=Kind.NOTEBOOK,
            state="RUNNING",
            runs=[(NOW - timedelta(days=1, hours=1), None)],
            queued_at=NOW - timedelta(days=1, hours=1, minutes=2),
            admitted_at=NOW - timedelta(days=1, hours=1, minutes=1),
            last_activity_at=NOW - timedelta(minutes=50),
        ),
        # Ran on the 12th, and again on the 16th: its days straddle a 7-day range's start
        # with nothing on its first day.
        "restarted": make(
            project,
            member,
            cpu_flavor,
            name="restarted",
            kind=Kind.NOTEBOOK,
            state="STOPPED",
            runs=[
                (datetime(2025, 3, 12, 10, tzinfo=UTC), datetime(2025, 3, 12, 23, 30, tzinfo=UTC)),
                (datetime(2025, 3, 16, 9, tzinfo=UTC), datetime(2025, 3, 16, 11, 0, 5, tzinfo=UTC)),
            ],
            queued_at=datetime(2025, 3, 16, 8, 50, tzinfo=UTC),
            admitted_at=datetime(2025, 3, 16, 8, 59, 59, tzinfo=UTC),
            finished_at=datetime(2025, 3, 16, 11, 1, tzinfo=UTC),
        ),
        # Another project's: never counted here.
        "other": make(
            other_project,
            owner,
            gpu_flavor,
            name="other",
            state="RUNNING",
            gpu=4,
            runs=[(NOW - timedelta(days=2), None)],
            queued_at=NOW - timedelta(days=2, hours=1),
            admitted_at=NOW - timedelta(days=2),
        ),
        "other_wait": make(
            other_project,
            owner,
            gpu_flavor,
            name="other wait",
            state="QUEUED",
            queued_at=NOW - timedelta(hours=3),
        ),
    }
    project.notebook_idle_minutes = 120
    project.monthly_budget = Decimal("1000")
    project.save()
    days_rebuild([TODAY - timedelta(days=n) for n in range(10)], now=NOW)
    return items


def reference_usage(
    workloads: list[Workload], start: datetime, end: datetime
) -> tuple[float, Decimal]:
    """GPU-hours and money: exact RUNNING seconds × GPUs; money minute by minute (each started
    minute, one at least, priced at the version in effect at its start), in the range."""
    seconds, money = 0.0, Decimal(0)
    for w in workloads:
        prices = sorted(
            FlavorPrice.objects.filter(flavor=w.flavor).values_list("valid_from", "price_per_hour")
        )
        for run in JobRun.objects.filter(job=w):
            began, ended = run.started_at, run.finished_at or NOW
            overlap = (min(ended, end) - max(began, start)).total_seconds()
            seconds += max(0.0, overlap) * run.units * w.flavor.gpus_per_unit
            micro = (ended - began) // timedelta(microseconds=1)
            for k in range(max(1, -(-micro // 60_000_000))):
                moment = began + timedelta(minutes=k)
                if start <= moment < end:
                    price = [p for at, p in prices if at <= moment][-1]
                    money += price * run.units
    return seconds / 3600, (money / 60).quantize(Decimal("0.01"), ROUND_HALF_UP)


def bucketed(wait: float) -> float:
    """What the dashboard counts a wait as: waits under a second as half a second, others as
    the geometric middle of the power-of-1.05 seconds around them (found by counting up)."""
    if wait < 1:
        return 0.5
    bucket = 1
    while wait >= 1.05**bucket:
        bucket += 1
    return float(1.05 ** (bucket - 0.5))


def wait_percentiles(waits: list[float]) -> dict[str, float]:
    """p50 and p95 as percentile_cont computes them."""
    if len(waits) == 1:
        return {"p50": waits[0], "p95": waits[0]}
    return {
        "p50": statistics.median(waits),
        "p95": statistics.quantiles(waits, n=100, method="inclusive")[94],
    }


def page(client: Client, url: str) -> Any:
    response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return response


def test_headline_equals_independent_counts(history: dict[str, Any], owner: Any) -> None:
    response = page(logged_in(owner), "/p/alpha/dashboard/?range=7d")
    start = datetime(2025, 3, 14, tzinfo=UTC)
    end = datetime(2025, 3, 21, tzinfo=UTC)
    mine = [w for k, w in history.items() if not k.startswith("other")]
    gpu_hours, money = reference_usage(mine, start, end)
    head = response.context["headline"]
    assert head["gpu_hours"] == pytest.approx(gpu_hours)
    assert head["cost"] == money
    assert head["running"] == 2  # the job and the notebook
    assert head["queued"] == 2
    assert head["failed"] == 1 and head["done"] == 2
    assert head["success_rate"] == pytest.approx(2 / 3)
    admitted = [w for w in mine if w.admitted_at and start <= w.admitted_at < end]
    waits = [(w.admitted_at - w.queued_at).total_seconds() for w in admitted]
    # From the day histograms: the percentiles of the waits taken as their buckets' middles,
    # within ±2.5 % of the exact ones.
    expected = wait_percentiles([bucketed(w) for w in waits])
    exact = wait_percentiles(waits)
    for name in ("p50", "p95"):
        assert head["waits"][name] == pytest.approx(expected[name], rel=1e-9)
        assert abs(head["waits"][name] / exact[name] - 1) <= 0.025
    # Per day of admission (the chart is in minutes, to 0.01).
    chart = response.context["charts"]["queue-wait"]
    for day in {w.admitted_at.date() for w in admitted}:
        of_day = [
            bucketed((w.admitted_at - w.queued_at).total_seconds())
            for w in admitted
            if w.admitted_at.date() == day
        ]
        n = chart["labels"].index(day.isoformat())
        for series, name in zip(chart["series"], ("p50", "p95"), strict=True):
            assert series["data"][n] == round(wait_percentiles(of_day)[name] / 60, 2)
    # Filtered by user, by flavor, by both: the same buckets, by owner and flavor.
    client = logged_in(owner)
    filters = {
        "user=member": lambda w: w.owner.username == "member",
        "flavor=test-2-gpu": lambda w: w.flavor.name == "test-2-gpu",
        "user=owner&flavor=test-2-gpu": lambda w: (
            w.owner.username == "owner" and w.flavor.name == "test-2-gpu"
        ),
    }
    for query, keep in filters.items():
        theirs = [(w.admitted_at - w.queued_at).total_seconds() for w in admitted if keep(w)]
        got = page(client, f"/p/alpha/dashboard/?range=7d&{query}").context["headline"]["waits"]
        expected = wait_percentiles([bucketed(w) for w in theirs])
        assert got == pytest.approx(expected, rel=1e-9), query
    nobody = page(client, "/p/alpha/dashboard/?range=7d&user=nobody").context["headline"]
    assert nobody["waits"] == {"p50": None, "p95": None}
    # A label filter reads its workloads' waits exactly (free-form labels are not rolled up).
    labelled = page(client, "/p/alpha/dashboard/?range=7d&label=team")
    theirs = [(w.admitted_at - w.queued_at).total_seconds() for w in admitted if "team" in w.labels]
    assert labelled.context["headline"]["waits"] == pytest.approx(wait_percentiles(theirs))
    assert "±2.5 %" not in labelled.content.decode()
    body = response.content.decode()
    assert "&lt;b&gt;wait two&lt;/b&gt;" in body and "<b>wait two</b>" not in body
    assert "no data" in body  # no utilisation source: never 0
    assert "±2.5 %, from waits counted by day in log buckets" in body
    assert chart["title"] == "Queue wait per day (±2.5 %)"


def test_ranges_and_filters(history: dict[str, Any], owner: Any) -> None:
    client = logged_in(owner)
    mine = [w for k, w in history.items() if not k.startswith("other")]
    cases = {
        "range=today": (datetime(2025, 3, 20, tzinfo=UTC), datetime(2025, 3, 21, tzinfo=UTC), mine),
        "range=30d": (datetime(2025, 2, 19, tzinfo=UTC), datetime(2025, 3, 21, tzinfo=UTC), mine),
        "range=month": (datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 3, 21, tzinfo=UTC), mine),
        "range=custom&from=2025-03-13&to=2025-03-17": (
            datetime(2025, 3, 13, tzinfo=UTC),
            datetime(2025, 3, 18, tzinfo=UTC),
            mine,
        ),
        "range=7d&user=member": (
            datetime(2025, 3, 14, tzinfo=UTC),
            datetime(2025, 3, 21, tzinfo=UTC),
            [w for w in mine if w.owner.username == "member"],
        ),
        "range=7d&flavor=test-2-gpu": (
            datetime(2025, 3, 14, tzinfo=UTC),
            datetime(2025, 3, 21, tzinfo=UTC),
            [w for w in mine if w.flavor.name == "test-2-gpu"],
        ),
        "range=30d&label=team%3Dnlp": (
            datetime(2025, 2, 19, tzinfo=UTC),
            datetime(2025, 3, 21, tzinfo=UTC),
            [w for w in mine if w.labels.get("team") == "nlp"],
        ),
        "range=30d&label=team": (
            datetime(2025, 2, 19, tzinfo=UTC),
            datetime(2025, 3, 21, tzinfo=UTC),
            [w for w in mine if "team" in w.labels],
        ),
    }
    for query, (start, end, chosen) in cases.items():
        head = page(client, f"/p/alpha/dashboard/?{query}").context["headline"]
        gpu_hours, money = reference_usage(chosen, start, end)
        assert head["gpu_hours"] == pytest.approx(gpu_hours), query
        assert head["cost"] == money, query
    # The chart of GPU-hours per user sums to the headline.
    response = page(client, "/p/alpha/dashboard/?range=30d")
    chart = response.context["charts"]["gpu-hours"]
    total = sum(sum(s["data"]) for s in chart["series"])
    assert total == pytest.approx(response.context["headline"]["gpu_hours"], abs=0.01)
    assert {s["name"] for s in chart["series"]} == {"owner", "member"}


def test_bad_filters_are_named_and_left_out(history: dict[str, Any], owner: Any) -> None:
    client = logged_in(owner)
    response = page(client, "/p/alpha/dashboard/?range=year&label=a%3D%3Db")
    text = response.content.decode()
    assert "Unknown range &#x27;year&#x27;" in text
    assert "Bad label filter" in text
    assert response.context["f"].range == "7d" and response.context["f"].label == ""
    response = page(client, "/p/alpha/dashboard/?range=custom&from=2025-03-10&to=2025-03-01")
    assert "&#x27;to&#x27; must be on or after &#x27;from&#x27;" in response.content.decode()
    assert client.get("/p/alpha/dashboard/top.csv?range=custom&from=x").status_code == 400


def test_queue_positions_as_admission_counts_them(
    history: dict[str, Any], owner: Any, settings: Any
) -> None:
    """One queue per project on a cluster; one for every project on the local machine (the
    other project's older job is ahead); the same places the job pages show."""
    for backend, places in (("kubernetes", [1, 2]), ("local", [2, 3])):
        settings.COMPUTE_BACKEND = backend
        rows = page(logged_in(owner), "/p/alpha/dashboard/").context["tables"]["waiting"]
        assert [w["position"] for w in rows] == places
        for w in rows:
            assert w["position"] == queue_position(job=Workload.objects.get(pk=w["id"]))


def test_tables(history: dict[str, Any], owner: Any, settings: Any) -> None:
    settings.COMPUTE_BACKEND = "kubernetes"
    response = page(logged_in(owner), "/p/alpha/dashboard/?range=7d")
    tables = response.context["tables"]
    waiting = [(w["name"], w["position"]) for w in tables["waiting"]]
    assert waiting == [("wait one", 1), ("<b>wait two</b>", 2)]
    assert tables["waiting"][0]["reason"].startswith("over the project's GPU quota")
    idle = tables["idle"]
    assert [w["name"] for w in idle] == ["nb"]
    assert idle[0]["idle_s"] == pytest.approx(50 * 60)
    assert idle[0]["stops_in_s"] == pytest.approx(70 * 60)
    assert [w["name"] for w in tables["failures"]] == ["failed"]
    assert tables["failures"][0]["reason"] == "exit code 1: CUDA error"
    body = response.content.decode()
    assert f"/p/alpha/jobs/{history['running'].pk}/" in body
    assert f"/p/alpha/notebooks/{history['notebook'].pk}/" in body


def test_top_by_cost(history: dict[str, Any], owner: Any, admin_user: Any) -> None:
    """Each workload's money in the range, independently, highest first: in ranges that cut
    workloads at their start (old: from the 13th to the 14th; restarted: on the 12th and the
    16th) and at their end (done: from the 17th to the 19th), for one project and for all."""
    days = {
        "range=7d": ("2025-03-14", "2025-03-20"),
        "range=today": ("2025-03-20", "2025-03-20"),
        "range=30d": ("2025-02-19", "2025-03-20"),
        "range=custom&from=2025-03-13&to=2025-03-17": ("2025-03-13", "2025-03-17"),
        "range=custom&from=2025-03-15&to=2025-03-18": ("2025-03-15", "2025-03-18"),
        "range=custom&from=2025-03-14&to=2025-03-14": ("2025-03-14", "2025-03-14"),
        "range=7d&user=member": ("2025-03-14", "2025-03-20"),
        "range=7d&flavor=test-cpu": ("2025-03-14", "2025-03-20"),
        "range=30d&user=member&flavor=test-cpu": ("2025-02-19", "2025-03-20"),
        "range=7d&user=nobody": ("2025-03-14", "2025-03-20"),
        "range=7d&flavor=none-such": ("2025-03-14", "2025-03-20"),
    }
    for base, client, scope in (
        (
            "/p/alpha/dashboard/",
            logged_in(owner),
            [w for k, w in history.items() if "other" not in k],
        ),
        ("/dashboard/", logged_in(admin_user), list(history.values())),
    ):
        for query, (first, last) in days.items():
            start = datetime.fromisoformat(first).replace(tzinfo=UTC)
            end = datetime.fromisoformat(last).replace(tzinfo=UTC) + timedelta(days=1)
            chosen = [
                w
                for w in scope
                if ("user=" not in query or f"user={w.owner.username}" in query)
                and ("flavor=" not in query or f"flavor={w.flavor.name}" in query)
                and any(
                    r.started_at < end and (r.finished_at is None or r.finished_at > start)
                    for r in JobRun.objects.filter(job=w)
                )
            ]
            expected = sorted(
                ((reference_usage([w], start, end)[1], w.name) for w in chosen),
                key=lambda t: (-t[0], t[1]),
            )
            top = page(client, f"{base}?{query}").context["tables"]["top"]
            got = [(w["cost"], w["name"]) for w in top]
            assert [c for c, _ in got] == sorted((c for c, _ in got), reverse=True), query
            assert sorted(got, key=lambda t: (-t[0], t[1])) == expected, (base, query)


def test_spans_follow_a_rebuilt_day(history: dict[str, Any], owner: Any) -> None:
    """A run removed from a day leaves the workload's span once that day is rebuilt."""
    JobRun.objects.filter(job=history["restarted"], run=2).delete()
    days_rebuild([datetime(2025, 3, 16, tzinfo=UTC).date()], now=NOW)
    top = page(logged_in(owner), "/p/alpha/dashboard/?range=7d").context["tables"]["top"]
    assert "restarted" not in [w["name"] for w in top]
    month = page(logged_in(owner), "/p/alpha/dashboard/?range=30d").context["tables"]["top"]
    _, money = reference_usage([history["restarted"]], NOW - timedelta(days=30), NOW)
    assert [w["cost"] for w in month if w["name"] == "restarted"] == [money]


def test_csv_exports(history: dict[str, Any], owner: Any, settings: Any) -> None:
    settings.COMPUTE_BACKEND = "kubernetes"
    client = logged_in(owner)
    for table in (
        "top",
        "waiting",
        "idle",
        "failures",
        "gpu-hours",
        "cost",
        "final-states",
        "queue-wait",
        "throughput",
    ):
        response = client.get(f"/p/alpha/dashboard/{table}.csv?range=7d")
        assert response.status_code == 200, table
        assert response["Content-Type"].startswith("text/csv")
        rows = list(csv.reader(io.StringIO(response.content.decode())))
        assert rows[0], table
    waiting = list(
        csv.DictReader(io.StringIO(client.get("/p/alpha/dashboard/waiting.csv").content.decode()))
    )
    assert [(r["name"], r["position"]) for r in waiting] == [
        ("wait one", "1"),
        ("<b>wait two</b>", "2"),
    ]
    gpu = list(
        csv.reader(
            io.StringIO(client.get("/p/alpha/dashboard/gpu-hours.csv?range=7d").content.decode())
        )
    )
    assert gpu[0] == ["label", "member", "owner"] and len(gpu) == 8
    assert client.get("/p/alpha/dashboard/nope.csv").status_code == 404


def test_csv_quotes_formulas(history: dict[str, Any], owner: Any) -> None:
    Workload.objects.filter(pk=history["wait1"].pk).update(name="=HYPERLINK(1)")
    rows = list(
        csv.DictReader(
            io.StringIO(logged_in(owner).get("/p/alpha/dashboard/waiting.csv").content.decode())
        )
    )
    assert rows[0]["name"] == "'=HYPERLINK(1)"


def test_who_may_open_it(
    history: dict[str, Any], member: Any, outsider: Any, admin_user: Any
) -> None:
    assert logged_in(member).get("/p/alpha/dashboard/").status_code == 403
    assert logged_in(member).get("/p/alpha/dashboard/top.csv").status_code == 403
    assert logged_in(outsider).get("/p/alpha/dashboard/").status_code == 404
    assert logged_in(outsider).get("/p/alpha/dashboard/top.csv").status_code == 404
    anonymous = Client().get("/p/alpha/dashboard/")
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]
    assert Client().get("/dashboard/").status_code == 302
    assert logged_in(member).get("/dashboard/").status_code == 404
    assert logged_in(outsider).get("/dashboard/top.csv").status_code == 404
    # An admin sees any project, and all of them.
    assert page(logged_in(admin_user), "/p/alpha/dashboard/").context["headline"]["queued"] == 2
    every = page(logged_in(admin_user), "/dashboard/?range=7d").context
    assert every["headline"]["queued"] == 3 and every["headline"]["running"] == 3
    start, end = datetime(2025, 3, 14, tzinfo=UTC), datetime(2025, 3, 21, tzinfo=UTC)
    gpu_hours, money = reference_usage(list(history.values()), start, end)
    assert every["headline"]["gpu_hours"] == pytest.approx(gpu_hours)
    assert every["headline"]["cost"] == money


def test_htmx_refresh_returns_the_numbers_only(history: dict[str, Any], owner: Any) -> None:
    response = logged_in(owner).get("/p/alpha/dashboard/?range=7d", HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="dash-numbers"') and "<html" not in body


def test_rollup_twice_is_the_same(history: dict[str, Any], owner: Any) -> None:
    client = logged_in(owner)
    before = page(client, "/p/alpha/dashboard/?range=30d").context["headline"]
    days_rebuild([TODAY - timedelta(days=n) for n in range(10)], now=NOW)
    after = page(client, "/p/alpha/dashboard/?range=30d").context["headline"]
    assert (before["gpu_hours"], before["cost"]) == (after["gpu_hours"], after["cost"])


def test_manager_of_one_project_only(history: dict[str, Any], other_project: Project) -> None:
    boss = UserFactory(username="boss")
    add_member(other_project, boss, Role.MANAGER)
    client = logged_in(boss)
    assert client.get("/p/alpha/dashboard/").status_code == 404
    ctx = page(client, "/p/beta/dashboard/?range=7d").context
    assert ctx["headline"]["running"] == 1 and ctx["headline"]["queued"] == 1


def test_wait_buckets_on_their_bounds() -> None:
    """A wait on a bucket's lower bound (a power of 1.05, as Python computes it) falls in that
    bucket, whatever the logarithm's rounding; every bucket's middle is within 2.5 %."""
    waits = [0.0, 0.4, 0.999, 1.0, 59.9, 60.0, 86_400.0, 3_000_000.0]
    waits += [1.05**k for k in range(1, 400)] + [1.05**k * (1 - 1e-12) for k in range(1, 400)]
    for wait in waits:
        assert bucket_middle(wait_bucket(wait)) == bucketed(wait), wait
        if wait >= 1:
            assert abs(bucketed(wait) / wait - 1) <= 0.025


def test_the_migration_fills_what_the_rollup_writes(history: dict[str, Any]) -> None:
    """Upgrading fills the wait histograms and the spans of the days already rolled up with
    what `days_rebuild` writes (the beat rebuilds only today and yesterday)."""
    from django.apps import apps

    from controlpanel.dashboards.models import WaitDay, WaitDayBy, WorkloadSpan

    tables = (WaitDay, WaitDayBy, WorkloadSpan)

    def rows() -> list[list[Any]]:
        return [
            sorted(
                table.objects.values_list(
                    *(f.attname for f in table._meta.fields if f.name != "id")
                )
            )
            for table in tables
        ]

    written = rows()
    assert written[0] and written[1] and len(written[2]) == 7  # the workloads with runs
    for table in tables:
        table.objects.all().delete()
    for name in ("0003_wait_histogram_and_spans", "0004_wait_histogram_by_owner_flavor"):
        importlib.import_module(f"controlpanel.dashboards.migrations.{name}").fill(apps, None)
    assert rows() == written
