"""In Chromium (#32): on a machine without a GPU the notebook form offers its GPU flavors
disabled, with the reason, and starts on a CPU one; a GPU flavor forced into the form anyway
is refused beside the field and nothing is made."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from controlpanel.notebooks.models import Notebook
from controlpanel.projects.models import Project
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.panel import PASSWORD

NO_GPU = (
    "This panel runs workloads on this machine, which has no GPU; choose a CPU flavor such as "
    "ai1-1-cpu."
)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_gpu_flavors_are_offered_disabled_and_refused_when_forced(
    page: Any, live_server: Any, owner: Any, project: Project, panel_s3: Any, cpu_machine: Any
) -> None:
    base = live_server.url
    browser_login(page, base, "owner", PASSWORD)
    page.wait_for_url(f"{base}/p/alpha/")
    page.goto(f"{base}/p/alpha/notebooks/new/")
    h100 = page.locator("#id_flavor option[value=h100-1-gpu]")
    expect(h100).to_be_disabled()
    expect(h100).to_have_attribute("title", NO_GPU)
    expect(page.locator("#id_flavor option[value=ai1-1-cpu]")).to_be_enabled()
    assert page.input_value("#id_flavor") == "ai1-1-cpu"
    expect(page.locator(".field", has=page.locator("#id_flavor")).locator(".help")).to_have_text(
        "This panel runs workloads on this machine, which has no GPU: its GPU flavors are shown "
        "disabled."
    )
    # A person who edits the page to pick one anyway is answered beside the field.
    h100.evaluate("option => { option.disabled = false; option.selected = true; }")
    page.fill("#id_name", "forced")
    page.click("#notebook-form button[type=submit]")
    error = page.locator(".field", has=page.locator("#id_flavor")).locator(".field-error")
    expect(error).to_have_text(NO_GPU)
    assert not Notebook.objects.exists()
    # Chromium logs the form's 400 (the form again, with what is wrong), and only that.
    errors = console_errors(page)
    assert errors == [
        "Failed to load resource: the server responded with a status of 400 (Bad Request) "
        f"[{base}/p/alpha/notebooks/new/:0]"
    ]
    errors.clear()
