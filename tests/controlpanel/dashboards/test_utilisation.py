"""GPU utilisation from Prometheus (NVIDIA's DCGM exporter), against a real HTTP server on
loopback that answers like Prometheus's /api/v1/query: per workload on the dashboard's top
table, the idle GPU-hours in its headline and the CSV, on the job and notebook pages; without
a source or when Prometheus fails, "no data" with the reason, never 0."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from controlpanel.dashboards.rollups import days_rebuild
from controlpanel.engine.models import JobRun, Kind, Workload
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.projects.models import Project
from tests.controlpanel.test_settings import _check
from tests.fixtures.clock import FrozenClock
from tests.fixtures.panel import logged_in


class FakePrometheus(ThreadingHTTPServer):
    """Answers GET /api/v1/query with `answer` (status, JSON body) and records each query."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer: tuple[int, Any] = (200, _vector([]))
        self.delay_s = 0.0
        self.queries: list[dict[str, list[str]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakePrometheus

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path != "/api/v1/query":
            self.send_error(404)
            return
        self.server.queries.append(parse_qs(parts.query))
        time.sleep(self.server.delay_s)
        status, body = self.server.answer
        if "\\" in self.server.queries[-1]["query"][0]:
            # As Prometheus: a PromQL string's backslash starts an escape ("\-" is none).
            status, body = 400, {"status": "error", "error": "unknown escape sequence"}
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def _vector(series: list[tuple[str, str, float | str]]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"namespace": ns, "pod": pod}, "value": [time.time(), str(value)]}
                for ns, pod, value in series
            ],
        },
    }


@pytest.fixture
def prometheus(settings: Any) -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.DCGM_PROMETHEUS_URL = server.url
    settings.DCGM_METRIC = "DCGM_FI_DEV_GPU_UTIL"
    settings.DCGM_TIMEOUT_SECONDS = 1
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def flavor(db: Any) -> Flavor:
    flavor = Flavor.objects.create(
        name="util-2-gpu", gpu_model="H100", gpus_per_unit=2, vcpu_per_unit=4, memory_gib_per_unit=8
    )
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=datetime(2025, 1, 1, tzinfo=UTC), price_per_hour=Decimal("3")
    )
    return flavor


def _ran(
    project: Project, owner: Any, flavor: Flavor, name: str, kind: str, hours: float
) -> Workload:
    end = timezone.now().replace(microsecond=0) - timedelta(minutes=5)
    start = end - timedelta(hours=hours)
    workload = Workload.objects.create(
        project=project,
        owner=owner,
        flavor=flavor,
        name=name,
        image="img",
        kind=kind,
        gpu=1,
        state="DONE" if kind == Kind.JOB else "STOPPED",
        queued_at=start,
        admitted_at=start,
        started_at=start,
        finished_at=end,
    )
    JobRun.objects.create(
        uid=f"{workload.pk}-1",
        job=workload,
        project=project,
        run=1,
        flavor=flavor,
        units=1,
        started_at=start,
        finished_at=end,
    )
    return workload


@pytest.fixture
def work(
    frozen_clock: FrozenClock, project: Project, owner: Any, flavor: Flavor
) -> dict[str, Workload]:
    """Three runs that ended 5 minutes ago, on a clock that stands still: the figures' cache
    key holds the current minute, which must not turn between two views of a test."""
    items = {
        "job": _ran(project, owner, flavor, "train", Kind.JOB, 2),  # 2 GPUs x 2 h
        "nb": _ran(project, owner, flavor, "explore", Kind.NOTEBOOK, 1),  # 2 GPUs x 1 h
        "quiet": _ran(project, owner, flavor, "quiet", Kind.JOB, 1),  # no samples
    }
    today = timezone.now().astimezone(UTC).date()
    days_rebuild([today - timedelta(days=n) for n in range(2)])
    return items


def test_without_a_source_the_pages_say_no_data_never_zero(
    work: dict[str, Workload], owner: Any, settings: Any
) -> None:
    settings.DCGM_PROMETHEUS_URL = ""
    client = logged_in(owner)
    response = client.get("/p/alpha/dashboard/?range=7d")
    body = response.content.decode()
    assert response.context["utilisation"]["idle_gpu_hours"] is None
    assert "no DCGM source configured (DCGM_PROMETHEUS_URL)" in body
    assert all(row["utilisation"] is None for row in response.context["tables"]["top"])
    for workload in work.values():
        assert f'data-testid="util-{workload.pk}"><span class="muted">no data</span>' in body
    assert 'data-testid="gpu-utilisation"><span class="muted">no data</span>' in body
    job = client.get(f"/p/alpha/jobs/{work['job'].pk}/").content.decode()
    assert "GPU utilisation" in job and "no data" in job and "DCGM_PROMETHEUS_URL" in job


def test_utilisation_per_workload_and_idle_gpu_hours(
    work: dict[str, Workload], owner: Any, prometheus: FakePrometheus, frozen_clock: FrozenClock
) -> None:
    job, nb, quiet = work["job"].pk, work["nb"].pk, work["quiet"].pk
    prometheus.answer = (
        200,
        _vector(
            [
                ("ajuste-alpha", f"job-{job}-r1-x7k2p", 80.0),  # two GPUs' series, one pod each
                ("ajuste-alpha", f"job-{job}-r1-q9w3e", 60.0),
                ("ajuste-alpha", f"nb-{nb}-0", 10.0),
                ("ajuste-alpha", "someone-elses-pod", 99.0),
                ("ajuste-alpha", f"app-{quiet}-abc-def", "NaN"),
            ]
        ),
    )
    client = logged_in(owner)
    response = client.get("/p/alpha/dashboard/?range=7d")
    top = {row["name"]: row["utilisation"] for row in response.context["tables"]["top"]}
    assert top == {"train": 70.0, "explore": 10.0, "quiet": None}
    figures = response.context["utilisation"]
    # train: 4 GPU-hours 30 % idle; explore: 2 GPU-hours 90 % idle; quiet has no data.
    assert figures["idle_gpu_hours"] == pytest.approx(4 * 0.3 + 2 * 0.9)
    assert figures["known_gpu_hours"] == pytest.approx(6)
    assert figures["percent"] == pytest.approx((4 * 70 + 2 * 10) / 6)
    body = response.content.decode()
    assert "3.00" in body and "of 6.00 GPU-hours with utilisation data" in body
    assert f'data-testid="util-{job}">70%' in body
    query = prometheus.queries[-1]
    assert query["query"][0].startswith(
        'avg by (namespace, pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{namespace=~"ajuste-alpha",'
    )
    assert int(query["time"][0]) <= time.time()
    # The same view again within the minute: no new query (refreshes cost one a minute);
    # once the minute has turned, one.
    count = len(prometheus.queries)
    client.get("/p/alpha/dashboard/?range=7d", HTTP_HX_REQUEST="true")
    assert len(prometheus.queries) == count
    frozen_clock.advance(timedelta(seconds=60))
    client.get("/p/alpha/dashboard/?range=7d", HTTP_HX_REQUEST="true")
    assert len(prometheus.queries) == count + 1
    rows = list(
        csv.DictReader(
            io.StringIO(client.get("/p/alpha/dashboard/top.csv?range=7d").content.decode())
        )
    )
    assert {row["name"]: row["gpu_util_percent"] for row in rows} == {
        "train": "70.0",
        "explore": "10.0",
        "quiet": "",
    }


def test_every_projects_view_has_utilisation_by_project(
    work: dict[str, Workload],
    owner: Any,
    other_project: Project,
    flavor: Flavor,
    admin_user: Any,
    prometheus: FakePrometheus,
) -> None:
    theirs = _ran(other_project, owner, flavor, "theirs", Kind.JOB, 3)  # 2 GPUs x 3 h
    today = timezone.now().astimezone(UTC).date()
    days_rebuild([today - timedelta(days=n) for n in range(2)])
    prometheus.answer = (
        200,
        _vector(
            [
                ("ajuste-alpha", f"job-{work['job'].pk}-r1-x7k2p", 50.0),
                ("ajuste-beta", f"job-{theirs.pk}-r1-a1b2c", 90.0),
            ]
        ),
    )
    response = logged_in(admin_user).get("/dashboard/?range=7d")
    figures = response.context["utilisation"]
    assert figures["projects"] == [
        {
            "project": "alpha",
            "percent": 50.0,
            "idle_gpu_hours": pytest.approx(2.0),
            "known_gpu_hours": pytest.approx(4.0),
        },
        {
            "project": "beta",
            "percent": 90.0,
            "idle_gpu_hours": pytest.approx(0.6),
            "known_gpu_hours": pytest.approx(6.0),
        },
    ]
    assert figures["idle_gpu_hours"] == pytest.approx(2.6)
    assert 'namespace=~"ajuste-.+"' in prometheus.queries[-1]["query"][0]
    assert 'data-testid="table-utilisation"' in response.content.decode()
    # A project's own view has no such table and sees only its namespace.
    mine = logged_in(owner).get("/p/alpha/dashboard/?range=7d")
    assert [p["project"] for p in mine.context["utilisation"]["projects"]] == ["alpha"]
    assert 'data-testid="table-utilisation"' not in mine.content.decode()


def test_the_workload_pages_show_their_own_utilisation(
    work: dict[str, Workload], owner: Any, prometheus: FakePrometheus, settings: Any
) -> None:
    settings.DCGM_METRIC = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # a ratio, shown as a percentage
    nb = work["nb"]
    prometheus.answer = (200, _vector([("ajuste-alpha", f"nb-{nb.pk}-0", 0.42)]))
    page = logged_in(owner).get(f"/p/alpha/notebooks/{nb.pk}/").content.decode()
    assert "42%" in page and "mean over 1 h" in page
    query = prometheus.queries[-1]["query"][0]
    assert f'pod=~"(job|nb|app)-{nb.pk}-.*"' in query and "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in query
    assert "[3600s]" in query
    job = logged_in(owner).get(f"/p/alpha/jobs/{work['job'].pk}/").content.decode()
    assert "no samples for its pods" in job


@pytest.mark.parametrize(
    ("answer", "delay_s", "reason"),
    [
        (
            (503, {"status": "error", "error": "overloaded"}),
            0,
            "Prometheus answered HTTP 503: overloaded",
        ),
        ((200, b"<html>a proxy</html>"), 0, "Prometheus answered HTTP 200 without JSON"),
        (
            (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}),
            0,
            "something other than a vector",
        ),
        ((200, _vector([])), 2.5, "Prometheus did not answer (ReadTimeout"),
    ],
)
def test_a_failing_prometheus_is_no_data_with_the_reason(
    work: dict[str, Workload],
    owner: Any,
    prometheus: FakePrometheus,
    answer: tuple[int, Any],
    delay_s: float,
    reason: str,
) -> None:
    prometheus.answer, prometheus.delay_s = answer, delay_s
    response = logged_in(owner).get("/p/alpha/dashboard/?range=7d")
    assert response.status_code == 200
    assert response.context["utilisation"]["idle_gpu_hours"] is None
    assert reason in response.context["utilisation"]["problem"]
    assert reason.split(" (")[0] in response.content.decode()
    assert all(row["utilisation"] is None for row in response.context["tables"]["top"])


def test_nothing_listening_is_no_data(work: dict[str, Workload], owner: Any, settings: Any) -> None:
    settings.DCGM_PROMETHEUS_URL = "http://127.0.0.1:9"  # discard: nothing listens
    response = logged_in(owner).get("/p/alpha/dashboard/?range=7d")
    assert response.context["utilisation"]["problem"].startswith(
        "Prometheus did not answer (ConnectError"
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"DCGM_PROMETHEUS_URL": "prometheus:9090"}, "DCGM_PROMETHEUS_URL"),
        ({"DCGM_PROMETHEUS_URL": "ftp://prometheus"}, "DCGM_PROMETHEUS_URL"),
        ({"DCGM_METRIC": "DCGM_FI_DEV_FB_USED"}, "DCGM_METRIC"),
        ({"DCGM_TIMEOUT_SECONDS": "0"}, "DCGM_TIMEOUT_SECONDS"),
    ],
)
def test_a_bad_dcgm_setting_stops_startup_naming_it(env: dict[str, str], named: str) -> None:
    result = _check({"DEBUG": "1"} | env)
    assert result.returncode != 0 and named in result.stderr
