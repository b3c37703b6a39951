"""In Chromium, as a site admin: the Billing link, the month's table, a project's drill-down
to a run's minute lines, the invoice on screen and as printed (the print stylesheet keeps
only the sheet), and closing the month through its confirmation page, under the strict CSP
with no console error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import expect

from controlpanel.billing.models import Period, PeriodState
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.panel import PASSWORD, UserFactory


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_admin_billing_pages_in_chromium(page: Any, live_server: Any, project: Project) -> None:
    base = live_server.url
    UserFactory(username="boss", is_staff=True, is_superuser=True)
    flavor = Flavor.objects.create(name="test-gpu", vcpu_per_unit=8, memory_gib_per_unit=64)
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=datetime(2024, 12, 1, tzinfo=UTC), price_per_hour=Decimal(6)
    )
    owner = UserFactory(username="alice")
    job = Job.objects.create(
        project=project, owner=owner, name="train", image="x/y:1", flavor=flavor, gpu=2
    )
    start = datetime(2025, 1, 10, 10, tzinfo=UTC)
    run = JobRun.objects.create(  # recorded by the engine's hook as it is saved
        uid="pod-train",
        job=job,
        project=project,
        run=1,
        flavor=flavor,
        units=2,
        started_at=start,
        finished_at=start + timedelta(minutes=30, seconds=20),
    )

    browser_login(page, base, "boss", PASSWORD)
    page.goto(f"{base}/p/alpha/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Billing").click()
    page.wait_for_url(f"{base}/billing/")
    page.select_option("#month", "2025-01")  # a month the ledger bills in is offered
    page.click("form.filters button[type=submit]")
    page.wait_for_url(f"{base}/billing/?month=2025-01")
    table = page.locator("[data-testid=table-projects]")
    expect(table).to_contain_text("alpha")
    expect(table).to_contain_text("6.20")  # 31 minutes × 2 units × 6/h
    expect(page.locator("[data-testid=billing-rule]")).to_contain_text("each started minute")

    table.get_by_role("link", name="alpha").click()
    page.wait_for_url(f"{base}/billing/2025-01/p/alpha/")
    expect(page.locator("[data-testid=table-users]")).to_contain_text("alice")
    # The run's link reads "train #1 · pod-trai"; its title names the whole pod.
    page.locator("[data-testid=table-runs]").get_by_title("run pod-train").click()
    page.wait_for_url(f"{base}/billing/2025-01/p/alpha/runs/{run.pk}/")
    lines = page.locator("[data-testid=table-lines]")
    expect(lines).to_contain_text("2025-01-10 10:00:00 → 2025-01-10 10:31:00")
    expect(lines).to_contain_text("6.0000")

    page.goto(f"{base}/billing/2025-01/p/alpha/invoice/")
    expect(page.locator("[data-testid=invoice-total]")).to_contain_text("6.20 EUR")
    expect(page.locator(".topbar")).to_be_visible()
    page.emulate_media(media="print")
    expect(page.locator(".topbar")).to_be_hidden()
    expect(page.locator(".no-print").first).to_be_hidden()
    expect(page.locator("[data-testid=invoice]")).to_be_visible()
    page.emulate_media(media="screen")

    page.goto(f"{base}/billing/?month=2025-01")
    page.get_by_role("link", name="Close the month…").click()
    page.wait_for_url(f"{base}/billing/2025-01/close/")
    page.click("[data-testid=period-confirm]")
    page.wait_for_url(f"{base}/billing/?month=2025-01")
    expect(page.locator(".messages")).to_contain_text("2025-01 is closed now.")
    expect(page.locator("[data-testid=period-state]")).to_contain_text("closed")
    assert Period.objects.get(month=start.date().replace(day=1)).state == PeriodState.CLOSED

    # A deleted workload keeps its row, by its name, kind and owner, marked deleted (issue 32).
    Job.objects.get(pk=job.pk).delete()
    page.goto(f"{base}/billing/2025-01/p/alpha/")
    row = page.locator("[data-testid=table-workloads] tbody tr", has_text="train")
    expect(row).to_contain_text("alice")
    expect(row).to_contain_text("job")
    expect(row.locator(".badge")).to_have_text("deleted")
    expect(row.locator(".badge")).to_be_visible()
    assert console_errors(page) == []
