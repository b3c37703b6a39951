"""What open runs add to a month ("billed up to now"): its cost in queries does not grow with the
number of open runs (the dashboards and usage pages read it on every view)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlpanel.billing.selectors import open_runs_since_recorded
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from tests.controlpanel.billing.conftest import ran


def test_open_runs_cost_the_same_queries_however_many(
    project: Project, owner: Any, gpu: Flavor, cpu: Flavor
) -> None:
    # Runs that start after the receivers' recording (at the real now): nothing recorded yet.
    start = timezone.now().replace(second=0, microsecond=0) + timedelta(hours=1)
    now = start + timedelta(hours=1)

    def measured() -> tuple[int, Any]:
        with CaptureQueriesContext(connection) as queries:
            total = open_runs_since_recorded(month=start.date().replace(day=1), now=now)
        return len(queries), total

    ran(project, owner, "one", "JOB", gpu, 2, start, None)
    few, first = measured()
    assert first.unit_minutes > 0
    for n in range(20):
        flavor = gpu if n % 2 else cpu
        ran(project, owner, f"more-{n}", "JOB", flavor, 1, start + timedelta(minutes=30), None)
    many, total = measured()
    # 30 started minutes × 1 unit each, less the first, recorded as the run was saved.
    assert total.unit_minutes - first.unit_minutes == 20 * 29
    assert many == few
