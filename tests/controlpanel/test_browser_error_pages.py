"""Error pages in Chromium (#32): a member's own Dashboards link, a GET on the secrets URL and a
bad billing month each land on the styled page, saying what happened and with the way back."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from controlpanel.projects.models import Project
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.panel import PASSWORD, UserFactory


def _only_the_status_was_logged(page: Any, url: str, status: str) -> None:
    """Chromium logs the error status of the document it was asked for; only that one."""
    errors = console_errors(page)
    assert errors == [
        f"Failed to load resource: the server responded with a status of {status} [{url}:0]"
    ]
    errors.clear()


def _styled(page: Any, status: int) -> None:
    card = page.locator(f"[data-testid=error-{status}]")
    expect(card).to_be_visible()
    # the panel's stylesheet applies (a bare answer has none): the card is laid out as one
    assert page.evaluate("document.styleSheets.length") > 0
    assert card.evaluate("el => getComputedStyle(el).display") != "inline"
    expect(page.locator("header.topbar")).to_be_visible()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_members_dashboards_link_and_a_get_on_secrets(
    page: Any, live_server: Any, member: Any, project: Project
) -> None:
    base = live_server.url
    browser_login(page, base, "member", PASSWORD)
    page.wait_for_url(f"{base}/p/alpha/")
    with page.expect_navigation() as navigation:
        page.click("nav.mainnav >> text=Dashboards")
    assert navigation.value.status == 403
    _only_the_status_was_logged(page, f"{base}/p/alpha/dashboard/", "403 (Forbidden)")
    _styled(page, 403)
    expect(page.locator("[data-testid=error-message]")).to_have_text(
        "Only the project's managers can do this."
    )
    expect(page.locator("main a", has_text="Members")).to_have_attribute(
        "href", "/p/alpha/members/"
    )
    page.click("text=Back to Alpha")
    page.wait_for_url(f"{base}/p/alpha/")

    secrets = f"{base}/p/alpha/secrets/"
    assert page.goto(secrets).status == 405
    _only_the_status_was_logged(page, secrets, "405 (Method Not Allowed)")
    _styled(page, 405)
    expect(page.locator("[data-testid=error-message]")).to_contain_text(
        "This address does not answer a GET"
    )
    expect(page.locator("a.button.primary")).to_have_attribute("href", "/p/alpha/")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_bad_billing_month(page: Any, live_server: Any) -> None:
    UserFactory(username="root", is_staff=True, is_superuser=True)
    browser_login(page, live_server.url, "root", PASSWORD)
    page.wait_for_load_state()
    url = f"{live_server.url}/billing/?month=2025-13"
    assert page.goto(url).status == 400
    _only_the_status_was_logged(page, url, "400 (Bad Request)")
    _styled(page, 400)
    expect(page.locator("[data-testid=error-message]")).to_contain_text("month:")
