"""In Chromium at 1366 × 768 (issue 32): the billing runs table and the audit table fit the
screen (the page never scrolls sideways, no table scrolls inside its frame), a run reads as its
workload's name and a short id, and a CPU run's amount reads on the billing pages as on the
job's own page (0.0007 EUR, where the billing pages said 0.00)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import expect

from controlpanel.audit import record
from controlpanel.audit.models import AuditEvent
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from tests.fixtures.browser import browser_login
from tests.fixtures.panel import PASSWORD, UserFactory, add_member

LAPTOP = {"width": 1366, "height": 768}
START = datetime(2025, 1, 10, 10, tzinfo=UTC)
LONG = "tokenizer-ablation-with-a-rather-long-descriptive-name-07"

# Whether the page scrolls sideways, and every table frame that does.
OVERFLOW = """() => ({
  page: document.documentElement.scrollWidth - window.innerWidth,
  tables: [...document.querySelectorAll('.table-wrap')]
    .filter(w => w.scrollWidth > w.clientWidth + 1)
    .map(w => w.querySelector('table')?.dataset.testid + ' ' + (w.scrollWidth - w.clientWidth)),
})"""


def _flavor(name: str, gpus: int, price: str) -> Flavor:
    flavor = Flavor.objects.create(
        name=name, gpus_per_unit=gpus, vcpu_per_unit=1, memory_gib_per_unit=4
    )
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=datetime(2024, 12, 1, tzinfo=UTC), price_per_hour=Decimal(price)
    )
    return flavor


def _ran(project: Project, owner: Any, name: str, flavor: Flavor, minutes: int) -> Job:
    end = START + timedelta(minutes=minutes) - timedelta(seconds=30)
    job = Job.objects.create(
        project=project,
        owner=owner,
        name=name,
        image="x/y:1",
        flavor=flavor,
        gpu=1,
        state="DONE",
        started_at=START,
        finished_at=end,
    )
    JobRun.objects.create(  # the billing receivers write its lines as it is saved
        uid=uuid.uuid4().hex,
        job=job,
        project=project,
        run=1,
        flavor=flavor,
        units=1,
        started_at=START,
        finished_at=end,
    )
    return job


def _fits(page: Any) -> None:
    page.wait_for_load_state("load")
    assert page.evaluate(OVERFLOW) == {"page": 0, "tables": []}


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_billing_and_audit_tables_fit_and_amounts_read_as_on_the_job_page(
    page: Any, live_server: Any, project: Project
) -> None:
    base = live_server.url
    UserFactory(username="boss", is_staff=True, is_superuser=True)
    owner = UserFactory(username="data-science-team-lead-with-a-long-name")
    add_member(project, owner, "manager")
    cpu = _flavor("ai1-1-cpu-test", 0, "0.0400")  # 1 minute: 0.04 / 60 = 0.000667
    gpu = _flavor("h100-1-gpu-test", 1, "2.8000")
    tiny = _ran(project, owner, "cpu-probe", cpu, 1)
    for n in range(3):
        _ran(project, owner, f"{LONG}-{n}", gpu, 31 + n)
    for n in range(12):  # long details and targets, and a stop without a reason
        record("workload.stop", actor=owner, project=project, target=tiny, name=LONG, reason="")
        record(
            "bucket.create",
            actor=owner,
            project=project,
            target=("bucket", uuid.uuid4()),
            name=f"{LONG}-bucket-{n}",
            datastore="LOCAL-" + "x" * 40,
        )

    for n in range(5):  # as a request records them: its address and id, a long path
        AuditEvent.objects.create(
            actor=owner,
            actor_username=owner.username,
            action="bucket.attach",
            project=project,
            project_slug="alpha",
            target_type="bucket",
            target_id=str(n),
            details={"prefix": "datasets/" + "shard" * 20, "name": LONG},
            ip="2001:db8:85a3::8a2e:370:7334",
            request_id=uuid.uuid4().hex,
        )

    page.set_viewport_size(LAPTOP)
    browser_login(page, base, "boss", PASSWORD)
    page.goto(f"{base}/p/alpha/jobs/{tiny.pk}/")
    on_job_page = page.locator("[data-testid=job-cost]").inner_text().split()[0]
    assert on_job_page == "0.0007"

    page.goto(f"{base}/billing/2025-01/p/alpha/")
    _fits(page)
    runs = page.locator("[data-testid=table-runs]")
    row = runs.locator("tr", has_text="cpu-probe #1")
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(6)).to_have_text(on_job_page)
    link = row.get_by_role("link")
    run = JobRun.objects.get(job=tiny)
    assert link.inner_text() == f"cpu-probe #1 · {run.uid[:8]}"
    assert link.get_attribute("title") == f"run {run.uid}"
    workloads = page.locator("[data-testid=table-workloads]")
    expect(workloads.locator("tr", has_text="cpu-probe").locator("td").last).to_have_text("0.0007")

    link.click()
    page.wait_for_url(f"{base}/billing/2025-01/p/alpha/runs/{run.pk}/")
    expect(page.locator("[data-testid=run-amount]")).to_have_text(f"1 min · {on_job_page} EUR")
    expect(page.locator("[data-testid=table-lines]")).to_contain_text(on_job_page)
    _fits(page)

    page.goto(f"{base}/p/alpha/usage/?month=2025-01")
    by_workload = page.locator("[data-testid=usage-by-workload]")
    expect(by_workload.locator("tr", has_text="cpu-probe").locator("td").last).to_have_text(
        on_job_page
    )
    _fits(page)

    page.goto(f"{base}/audit/")
    _fits(page)
    audit = page.locator("[data-testid=audit]")
    expect(audit).not_to_contain_text("reason=")
    expect(
        audit.get_by_role("link", name=f"job cpu-probe ({tiny.pk.hex[:8]})").first
    ).to_be_visible()
