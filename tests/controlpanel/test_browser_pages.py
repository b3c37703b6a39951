"""Every page in Chromium under the strict CSP, used as a person would (htmx swaps included),
with no console error anywhere: no blocked inline style or script, no failed resource.

Screenshots of each page land in var/screenshots/pages/ for a look."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from controlpanel.engine import curves
from controlpanel.engine.models import JobEvent, JobLogLine
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from storage import objects
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.panel import PASSWORD

SHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots" / "pages"


def finished_finetune(project: Project, owner: Any) -> Job:
    now = timezone.now()
    job = Job.objects.create(
        project=project,
        owner=owner,
        name="tune-7b",
        image="ajuste/finetune:1",
        preset="finetune",
        params={"rank": 16},
        flavor=Flavor.objects.get(name="h100-1-gpu"),
        state=JobState.DONE,
        state_reason="exit code 0",
        started_at=now - timedelta(minutes=42),
        finished_at=now,
        exit_code=0,
        progress={"step": 60, "max_steps": 60, "loss": 0.91, "tokens_per_s": 5120},
        volumes=["data@LOCAL/chat:/workspace/data:ro", "data@LOCAL/out:/workspace/output:rw"],
        logs_archived=True,
        log_lines=2,
    )
    curves.replace(job, [[step, 2.4 - step / 40] for step in range(0, 61, 5)])
    JobEvent.objects.create(job=job, run=1, state=JobState.DONE, reason="exit code 0", at=now)
    for seq, text in enumerate(["step 1 loss 2.4", "\x1b[32mdone\x1b[0m"], start=1):
        JobLogLine.objects.create(job=job, run=1, seq=seq, text=text)
    return job


class Visit:
    """Checks after each step: no console error so far, no template source in the page."""

    def __init__(self, page: Any) -> None:
        self.page = page
        SHOTS.mkdir(parents=True, exist_ok=True)

    def check(self, name: str) -> None:
        self.page.wait_for_load_state("networkidle")
        html = self.page.content()
        assert "{#" not in html and "{%" not in html, f"template source shows on {name}"
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        assert console_errors(self.page) == [], (name, console_errors(self.page))


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_page_without_a_console_error(
    page: Any,
    live_server: Any,
    owner: Any,
    project: Project,
    panel_s3: Any,
    settings: Any,
    tmp_path: Path,
    gpu_machine: Any,  # the job form's GPU units are shown: a machine with GPUs offers them
) -> None:
    from controlpanel.celery import app

    settings.S3_CORS_ORIGINS = [live_server.url]
    settings.S3_PUBLIC_ENDPOINT_URL = ""
    owner.is_staff = True  # the New project page is for site admins
    owner.save()
    job = finished_finetune(project, owner)
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "train.jsonl").write_text('{"text": "hello"}\n')
    (folder / "sub" / "eval.jsonl").write_text('{"text": "bye"}\n')
    name = f"pages-{uuid.uuid4().hex[:10]}"
    visit = Visit(page)
    base = live_server.url
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True  # recounts run in the request (no worker here)
    try:
        browser_login(page, base, "owner", PASSWORD)
        page.wait_for_url(f"{base}/p/alpha/")
        visit.check("project-home")

        page.goto(f"{base}/p/alpha/jobs/")
        expect(page.locator("text=tune-7b")).to_be_visible()
        visit.check("jobs-list")
        page.goto(f"{base}/p/alpha/jobs/{job.pk}/")
        expect(page.locator("[data-testid=job-state]")).to_have_text("DONE")
        expect(page.locator("canvas[data-kind=loss][data-drawn='1']")).to_be_visible()
        visit.check("job-detail")

        page.goto(f"{base}/p/alpha/jobs/new/?tab=finetune")
        # Something set an inline style through the CSSOM (allowed), as extensions, autofill
        # or a screenshot tool do; the live validation's swap must not turn it into a style
        # attribute (blocked).
        for field in ("#id_ft-output_volume", "#id_ft-timeout", "#id_ft-name"):
            page.locator(field).evaluate("el => el.style.setProperty('caret-color', 'red')")
        page.fill("#id_ft-output_volume", "results@LOCAL/finetune/mistral-7b-chat-2026-12-03")
        page.select_option("#id_ft-flavor", "h100-1-gpu")
        expect(page.locator("label[for=id_ft-gpu]")).to_have_text("Units (1 GPU each)")
        visit.check("job-new-gpu")
        page.fill("#id_ft-timeout", "2h")
        page.select_option("#id_ft-flavor", "ai1-1-cpu")
        expect(page.locator("label[for=id_ft-gpu]")).to_have_text("Units (1 vCPU each)")
        expect(page.locator("[data-testid=estimate] strong")).to_contain_text("0.04")
        assert page.input_value("#id_ft-timeout") == "2h"
        visit.check("job-new-finetune")
        page.goto(f"{base}/p/alpha/jobs/new/?tab=custom")
        page.fill("#id_c-image", "not an image")
        page.locator("#id_c-image").dispatch_event("change")
        expect(page.locator(".field-error").first).to_be_visible()
        visit.check("job-new-custom")

        page.goto(f"{base}/p/alpha/buckets/")
        page.fill("input[name=name]", name)
        page.click("button[value=create]")
        expect(page.locator(f"[data-testid=buckets] >> text={name}")).to_be_visible()
        visit.check("buckets-list")
        page.click(f"[data-testid=buckets] >> text={name}")
        page.wait_for_url(f"{base}/p/alpha/buckets/LOCAL/{name}/")
        page.set_input_files("#upload-folder", str(folder))
        page.click("#upload-form button[type=submit]")
        page.locator("#upload-queue li[data-state=done]").nth(1).wait_for(timeout=60_000)
        visit.check("bucket-upload")
        page.click("[data-testid=folder] >> text=corpus/")
        page.wait_for_url("**prefix=corpus%2F")
        # htmx pushes the URL before it swaps: type into the folder's own filter, not the root's,
        # once htmx has taken the new listing in (it keeps `htmx-added` until its settle step
        # attaches the filter's triggers: keys typed before that send nothing).
        listing = page.locator("#listing[data-prefix='corpus/']")
        expect(listing).not_to_have_class(re.compile(r"\bhtmx-added\b"))
        listing.locator("#filter-q").type("tra")
        page.locator("[data-testid=folder]", has_text="sub/").wait_for(state="detached")
        expect(page.locator("[data-testid=object]")).to_have_text(["train.jsonl"])
        visit.check("bucket-browse-filtered")

        page.goto(f"{base}/p/alpha/buckets/")
        row = page.locator(f"tr[data-bucket={name}]")
        expect(row.locator("td").nth(2)).to_have_text("2")
        objects.put_object(panel_s3, bucket=name, key="written-by-a-job.txt", data=b"x")
        with page.expect_response("**/recount/"):
            row.locator("[data-testid=recount]").click()
        expect(row.locator("td").nth(2)).to_have_text("3", timeout=20_000)
        expect(row.locator("[data-testid=counted] time")).to_have_text("just now")
        visit.check("buckets-recounted")

        for shot, path in [
            ("settings", "/settings/"),
            ("project-new", "/projects/new/"),
            ("members", "/p/alpha/members/"),
        ]:
            page.goto(base + path)
            expect(page.locator("[data-testid=project-switcher] summary")).to_have_text("Alpha")
            visit.check(shot)

        missing = f"{base}/p/alpha/jobs/no-such-job/"
        assert page.goto(missing).status == 404
        expect(page.locator("[data-testid=not-found]")).to_be_visible()
        # Chromium logs the 404 of the document asked for; that one, and only it, is expected.
        errors = console_errors(page)
        status = "the server responded with a status of 404 (Not Found)"
        assert errors == [f"Failed to load resource: {status} [{missing}:0]"]
        errors.clear()
        expect(page.locator("nav.mainnav >> text=Jobs")).to_have_attribute("href", "/p/alpha/jobs/")
        visit.check("not-found")

        page.goto(f"{base}/api/docs/")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("Ajuste API")
        visit.check("api-docs")
    finally:
        app.conf.task_always_eager = eager
