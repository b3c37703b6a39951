"""In Chromium: submit the fine-tune preset through the form, watch log lines and the progress
bar appear and the job reach DONE without reloading (real worker, beat and watcher processes,
the local backend running the real entry point)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from tests.controlpanel.jobs.test_local_journey import upload_dir
from tests.fixtures.browser import browser_login
from tests.fixtures.jobs import project_bucket
from tests.fixtures.panel import PASSWORD
from training.demo import make_demo_assets

SCREENSHOTS = Path(__file__).resolve().parents[3] / "var" / "screenshots"


@pytest.mark.browser
@pytest.mark.e2e
@pytest.mark.slow
def test_finetune_through_the_form(
    page: Any,
    live_server: Any,
    local_processes: Any,
    owner: Any,
    project: Project,
    panel_s3: Any,
    local_jobs: Any,
    tmp_path: Path,
) -> None:
    assets = make_demo_assets(tmp_path / "demo", examples=24)
    models = project_bucket(project, panel_s3, "models").name
    out = project_bucket(project, panel_s3, "results").name
    upload_dir(panel_s3, models, "tiny-llama", assets.model_dir)
    upload_dir(panel_s3, models, "chat", assets.data_file.parent)

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser_login(page, live_server.url, "owner", PASSWORD)
    page.goto(f"{live_server.url}/p/alpha/jobs/new/?tab=finetune")
    page.fill("#id_ft-name", "demo <b>tune</b>")
    page.fill("#id_ft-model_volume", f"{models}@LOCAL/tiny-llama")
    page.fill("#id_ft-data_volume", f"{models}@LOCAL/chat")
    page.fill("#id_ft-output_volume", f"{out}@LOCAL/run1")
    page.fill("#id_ft-max_steps", "6")
    page.fill("#id_ft-batch_size", "2")
    page.fill("#id_ft-max_length", "96")
    page.select_option("#id_ft-flavor", "ai1-1-cpu")
    page.wait_for_selector("[data-testid=estimate] strong")  # htmx validation: cost per hour
    assert "0.04" in page.inner_text("[data-testid=estimate]")
    page.screenshot(path=str(SCREENSHOTS / "job-form.png"), full_page=False)
    page.click("#job-form button[type=submit]")
    page.wait_for_load_state()
    errors = page.locator(".field-error, .error").all_inner_texts()
    assert errors == [], errors
    page.wait_for_url("**/jobs/*-*/")
    assert page.inner_text("h1").startswith("demo <b>tune</b>")  # escaped, shown as text

    page.wait_for_selector("#log-lines .ln", timeout=120_000)
    page.wait_for_selector("[data-testid=job-progress] progress", timeout=120_000)
    # Polling from Python: the page's CSP forbids the eval a JS predicate would need.
    expect(page.locator("[data-testid=job-state]")).to_have_text("DONE", timeout=180_000)
    expect(page.locator("[data-testid=log-end]")).to_be_visible(timeout=30_000)
    assert page.locator("#log-lines .ln").count() > 3
    assert page.get_attribute("[data-testid=job-progress] progress", "value") == "100"
    job = Job.objects.get(name="demo <b>tune</b>")
    assert job.state == "DONE" and job.progress["step"] == 6
    page.screenshot(path=str(SCREENSHOTS / "job-detail.png"), full_page=False)
