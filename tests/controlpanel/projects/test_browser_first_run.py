"""In Chromium: the Demo project's page says where to start (issue 32). Its first-run card leads
to the demo fine-tune, then to deploy its adapter, then to a notebook; each step is ticked once
the project did it; closing it keeps it closed for that user only. The manager's Settings link
leads to the settings page, where a change is saved and said."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from controlpanel.buckets.models import Bucket
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.notebooks.models import Notebook
from controlpanel.projects.models import FirstRunDismissal, Project
from tests.fixtures.browser import browser_login
from tests.fixtures.panel import PASSWORD, UserFactory, add_member


def _steps(page: Any) -> list[str | None]:
    items = page.locator("[data-testid=first-run-step]")
    return [items.nth(n).get_attribute("data-done") for n in range(items.count())]


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_first_run_card_leads_ticks_and_closes(
    page: Any, live_server: Any, project: Project
) -> None:
    base = live_server.url
    manager = UserFactory(username="newcomer")
    add_member(project, manager, "manager")
    colleague = UserFactory(username="colleague")
    add_member(project, colleague, "member")
    Bucket.objects.create(project=project, datastore="LOCAL", name="demo")
    cpu = Flavor.objects.get(name="ai1-1-cpu")

    browser_login(page, base, "newcomer", PASSWORD)
    page.goto(f"{base}/p/alpha/")
    card = page.locator("[data-testid=first-run]")
    expect(card).to_be_visible()
    expect(card.get_by_role("heading", name="Start here")).to_be_visible()
    assert _steps(page) == ["false", "false", "false"]
    first = card.get_by_role("link", name="New fine-tune")
    expect(first).to_have_class("button primary")  # the next step stands out
    first.click()
    page.wait_for_url(f"{base}/p/alpha/jobs/new/")
    expect(page.locator("input[name=ft-model_volume]")).to_have_value("demo@LOCAL/tiny-llama")

    job = Job.objects.create(
        project=project,
        owner=manager,
        name="demo fine-tune",
        image="x/ft:1",
        flavor=cpu,
        preset="finetune",
        state="DONE",
    )
    page.goto(f"{base}/p/alpha/")
    assert _steps(page) == ["true", "false", "false"]
    deploy = card.get_by_role("link", name="Deploy")
    expect(deploy).to_have_attribute("href", f"/p/alpha/apps/new/?from_job={job.pk}")
    expect(deploy).to_have_class("button primary")
    Notebook.objects.create(
        project=project,
        owner=manager,
        name="explore",
        image="x/nb:1",
        editor="jupyterlab",
        flavor=cpu,
        state="STOPPED",
    )
    page.reload()
    assert _steps(page) == ["true", "false", "true"]
    expect(card.locator("li.done .badge")).to_have_count(2)

    card.get_by_test_id("first-run-dismiss").click()  # htmx: the card goes in place
    expect(card).to_have_count(0)
    assert FirstRunDismissal.objects.filter(user=manager, project=project).exists()
    page.reload()
    expect(page.locator("[data-testid=first-run]")).to_have_count(0)

    page.get_by_test_id("settings-link").click()
    page.wait_for_url(f"{base}/p/alpha/settings/")
    page.fill("input[name=notebook_idle_minutes]", "45")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_url(f"{base}/p/alpha/settings/")
    expect(page.locator(".messages")).to_contain_text("Settings saved: notebook idle minutes.")
    project.refresh_from_db()
    assert project.notebook_idle_minutes == 45

    # the colleague still has the card: closing was the manager's
    page.click("[data-testid=logout]")  # a POST, as the menu's button sends it
    page.wait_for_url(f"{base}/login/")
    browser_login(page, base, "colleague", PASSWORD)
    page.goto(f"{base}/p/alpha/")
    expect(page.locator("[data-testid=first-run]")).to_be_visible()
    expect(page.locator("[data-testid=settings-link]")).to_have_count(0)
