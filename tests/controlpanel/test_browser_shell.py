"""The shell in a real browser: log in, switch project, log out (under the strict CSP)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.browser import browser_login
from tests.fixtures.panel import PASSWORD, ProjectFactory, add_member


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_login_switch_project_logout(page: Any, live_server: Any, owner: Any) -> None:
    add_member(ProjectFactory(slug="gamma", name="Gamma"), owner)
    browser_login(page, live_server.url, "owner", "wrong")
    assert "correct username and password" in page.inner_text(".error")
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.wait_for_url(f"{live_server.url}/p/alpha/")
    assert page.inner_text("h1").startswith("Alpha")
    page.click("[data-testid=project-switcher] summary")
    page.click("text=Gamma")
    page.wait_for_url(f"{live_server.url}/p/gamma/")
    assert page.inner_text("h1").startswith("Gamma")
    page.set_viewport_size({"width": 390, "height": 844})  # a phone: the menu folds
    assert not page.is_visible("[data-testid=logout]")
    page.click(".nav-toggle-label")
    page.click("[data-testid=logout]")
    page.wait_for_url(f"{live_server.url}/login/")
    page.goto(f"{live_server.url}/p/alpha/")
    assert "/login/" in page.url
