"""`seed_history` makes marked demo history that the dashboard shows at once."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from controlpanel.dashboards.models import UsageDay
from controlpanel.workloads.models import JobRun, Workload
from tests.fixtures.panel import logged_in


def test_seed_history_is_marked_and_rolled_up(db: Any, admin_user: Any) -> None:
    out = StringIO()
    call_command("seed_history", "--jobs", "300", "--days", "5", "--project", "hist", stdout=out)
    assert "Made 300 demo workloads in hist" in out.getvalue()
    rows = Workload.objects.filter(project__slug="hist")
    assert rows.count() == 300
    assert rows.filter(labels__demo="seed_history").count() == 300
    assert (
        JobRun.objects.filter(project__slug="hist").count() == rows.exclude(started_at=None).count()
    )
    assert UsageDay.objects.filter(project__slug="hist").exists()
    head = logged_in(admin_user).get("/p/hist/dashboard/?range=30d").context["headline"]
    assert head["gpu_hours"] > 0 and head["failed"] > 0 and head["done"] > 0
    # The same hours through the label filter (computed from the runs, not the rollups); the
    # running ones have grown by the time between the two requests.
    assert head["gpu_hours"] == pytest.approx(
        logged_in(admin_user)
        .get("/p/hist/dashboard/?range=30d&label=demo%3Dseed_history")
        .context["headline"]["gpu_hours"],
        rel=1e-4,
    )
    with pytest.raises(CommandError):
        call_command("seed_history", "--jobs", "0", "--days", "5")
