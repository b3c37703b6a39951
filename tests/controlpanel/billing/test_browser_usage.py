"""The usage page in Chromium under the strict CSP: a manager goes from the project page to
January's usage with the month selector, sets a budget (a bad amount first), with no
console error."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import expect

from controlpanel.engine.models import Workload
from controlpanel.projects.models import Project
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.panel import PASSWORD


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_manager_reads_usage_and_sets_the_budget(
    page: Any, live_server: Any, project: Project, january: dict[str, Workload]
) -> None:
    base = live_server.url
    browser_login(page, base, "owner", PASSWORD)
    page.wait_for_url(f"{base}/p/alpha/")
    page.get_by_test_id("usage-link").click()
    page.wait_for_url(f"{base}/p/alpha/usage/")
    page.get_by_label("Month", exact=True).select_option("2025-01")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url(f"{base}/p/alpha/usage/?month=2025-01")
    expect(page.get_by_test_id("total-amount")).to_contain_text("3.96")
    expect(page.get_by_test_id("usage-by-workload")).to_contain_text("train-a")
    expect(page.get_by_test_id("billing-rule")).to_contain_text("each started minute")

    budget = page.get_by_label("Monthly budget")
    budget.fill("12.345")
    page.get_by_role("button", name="Save budget").click()
    expect(page.get_by_text("Use at most 2 decimals (cents).")).to_be_visible()
    # the form's answer is a 400, which Chromium logs: that one is expected, nothing else
    errors = console_errors(page)
    refused = [e for e in errors if "status of 400" in e and "/p/alpha/usage/budget/" in e]
    assert len(refused) == 1, errors
    errors.remove(refused[0])
    page.get_by_label("Monthly budget").fill("150")
    page.get_by_role("button", name="Save budget").click()
    page.wait_for_url(f"{base}/p/alpha/usage/")
    expect(page.get_by_text("Budget saved.")).to_be_visible()
    expect(page.get_by_test_id("budget-status")).to_contain_text("of 150.00")
    project.refresh_from_db()
    assert project.monthly_budget == Decimal("150.00")
    assert console_errors(page) == []
