"""The dashboard and the job page's training curve in Chromium under the strict CSP: Chart.js
(from static) draws every chart, with no console error; the numbers (and the capacity page's
figures) refresh through htmx."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from controlpanel.dashboards.rollups import days_rebuild, recent_days
from controlpanel.engine import curves
from controlpanel.engine.models import JobRun, Kind, Workload
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.panel import PASSWORD


def _job(
    project: Project, owner: Any, name: str, curve: list[list[Any]] | None = None, **fields: Any
) -> Workload:
    now = timezone.now()
    flavor = Flavor.objects.get(name="h100-1-gpu")
    job = Workload.objects.create(
        project=project, owner=owner, flavor=flavor, name=name, image="x", kind=Kind.JOB, **fields
    )
    curves.replace(job, curve or [])
    if job.started_at:
        JobRun.objects.create(
            uid=f"{job.pk}-1",
            job=job,
            project=project,
            run=1,
            flavor=flavor,
            units=1,
            started_at=job.started_at,
            finished_at=job.finished_at if job.finished_at else None,
        )
    assert now
    return job


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_dashboard_and_training_curve_draw_under_the_csp(
    page: Any, live_server: Any, owner: Any, project: Project
) -> None:
    now = timezone.now()
    project.monthly_budget = Decimal("500")
    project.save()
    tuned = _job(
        project,
        owner,
        "tune",
        state=JobState.DONE,
        preset="finetune",
        started_at=now - timedelta(hours=2),
        finished_at=now - timedelta(hours=1),
        queued_at=now - timedelta(hours=2, minutes=5),
        admitted_at=now - timedelta(hours=2),
        progress={"step": 12, "max_steps": 12, "loss": 0.9, "tokens_per_s": 5100.0},
        curve=[[s, 2.4 - s / 10, 5000 + s, 1e-4 * (12 - s) / 12] for s in range(1, 13)],
    )
    _job(
        project,
        owner,
        "broken",
        state=JobState.FAILED,
        state_reason="exit code 1",
        started_at=now - timedelta(minutes=30),
        finished_at=now - timedelta(minutes=20),
    )
    _job(project, owner, "waits", state=JobState.QUEUED, state_reason="over the GPU quota")
    days_rebuild(recent_days())
    base = live_server.url
    browser_login(page, base, "owner", PASSWORD)
    page.wait_for_url(f"{base}/p/alpha/")

    page.goto(f"{base}/p/alpha/dashboard/?range=7d")
    drawn = page.locator("#dash-numbers canvas[data-drawn='1']")
    expect(drawn).to_have_count(5)
    expect(page.locator("[data-testid=running]")).to_have_text("0")
    expect(page.locator("[data-testid=table-waiting]")).to_contain_text("over the GPU quota")
    expect(page.locator("[data-testid=idle-gpu-hours]")).to_contain_text(
        "no DCGM source configured (DCGM_PROMETHEUS_URL)"
    )
    # Something changes; the numbers part swaps itself in (htmx), the charts are drawn again.
    _job(project, owner, "new", state=JobState.RUNNING, started_at=timezone.now())
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    expect(page.locator("[data-testid=running]")).to_have_text("1")
    expect(drawn).to_have_count(5)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert console_errors(page) == []

    page.goto(f"{base}/p/alpha/jobs/{tuned.pk}/")
    curve = page.locator("canvas[data-kind=loss][data-drawn='1']")
    expect(curve).to_be_visible()
    expect(page.locator("[data-testid=loss-table] tbody tr")).to_have_count(12)
    page.get_by_label("tokens/s").check()
    page.get_by_label("learning rate").check()
    expect(curve).to_have_attribute("data-extra", "tokens lr")
    datasets = page.evaluate(
        "Chart.getChart(document.querySelector('canvas[data-kind=loss]')).data.datasets"
        ".map((d) => [d.label, d.data.length])"
    )
    assert datasets == [["loss", 12], ["tokens/s", 12], ["learning rate", 12]]
    assert console_errors(page) == []


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_capacity_figures_refresh_under_the_csp(
    page: Any, live_server: Any, admin_user: Any, owner: Any, project: Project
) -> None:
    base = live_server.url
    browser_login(page, base, "admin", PASSWORD)
    page.wait_for_url(f"{base}/**")
    page.goto(f"{base}/dashboard/capacity/")
    row = page.locator("[data-testid=table-flavors] tr", has_text="h100-1-gpu")
    expect(row.locator("td").nth(6)).to_have_text("0")
    # A job starts waiting; the figures part swaps itself in (htmx), no reload.
    _job(project, owner, "waits", state=JobState.QUEUED, queued_at=timezone.now())
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    expect(row.locator("td").nth(6)).to_have_text("1")
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert console_errors(page) == []
