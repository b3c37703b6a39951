"""`seed_history` makes marked demo history that the dashboard shows at once."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from controlpanel.dashboards.models import UsageDay
from controlpanel.engine.admission import Need, machine_usage, project_usage
from controlpanel.engine.models import FINAL_STATES, JobRun, Workload
from controlpanel.projects.models import Project
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
    # The same hours through the label filter (computed from the runs, not the rollups).
    assert head["gpu_hours"] == pytest.approx(
        logged_in(admin_user)
        .get("/p/hist/dashboard/?range=30d&label=demo%3Dseed_history")
        .context["headline"]["gpu_hours"],
        rel=1e-4,
    )
    with pytest.raises(CommandError):
        call_command("seed_history", "--jobs", "0", "--days", "5")


def test_seeded_history_holds_no_quota_and_stays_out_of_the_demo(
    db: Any, admin_user: Any, django_user_model: Any
) -> None:
    """The README's tip as written: its history is over (nothing running or waiting holds the
    project's quota or the machine's CPUs), in a project of its own, by nobody who can log in."""
    demo = Project.objects.create(slug="demo", name="Demo")
    call_command("seed_history", "--jobs", "2000", "--days", "30", stdout=StringIO())
    seeded = Workload.objects.filter(labels__demo="seed_history")
    assert seeded.count() == 2000
    assert set(seeded.values_list("project__slug", flat=True)) == {"history"}
    assert seeded.exclude(state__in=FINAL_STATES).count() == 0
    assert seeded.filter(finished_at=None).count() == 0
    history = Project.objects.get(slug="history")
    assert project_usage(project=history) == Need() == machine_usage()
    assert not Workload.objects.filter(project=demo).exists()
    demo_users = django_user_model.objects.filter(username__startswith="demo-")
    assert demo_users.count() == 5
    assert not demo_users.filter(is_active=True).exists()
    assert list(django_user_model.objects.filter(is_active=True)) == [admin_user]
