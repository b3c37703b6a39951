"""Job pages and fragments (escaping, filters, pagination, actions), ANSI rendering, progress
events, cost estimates and notifications (e-mail, signed webhook to a real HTTP server)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.test import Client
from django.utils import timezone

from controlpanel.engine.ansi import ansi_to_html
from controlpanel.engine.lifecycle import apply_observation
from controlpanel.engine.logs import _note_progress
from controlpanel.engine.models import JobEvent, JobLogLine
from controlpanel.engine.selectors import job_cost_estimate
from controlpanel.flavors.models import Flavor, FlavorPrice
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy.types import ObservedWorkload, Phase, WorkloadKind


def make_job(project: Project, owner: Any, **fields: Any) -> Job:
    defaults = {"name": "job", "image": "x/y:1", "flavor": Flavor.objects.get(name="h100-1-gpu")}
    return Job.objects.create(project=project, owner=owner, **(defaults | fields))


def test_ansi_colours_are_spans_and_text_is_escaped() -> None:
    html = ansi_to_html("\x1b[1;31merror\x1b[0m <script>alert(1)</script> \x1b[2K\r")
    assert html == (
        '<span class="ansi-bold ansi-fg-r">error</span> &lt;script&gt;alert(1)&lt;/script&gt; '
    )
    assert ansi_to_html("\x1b[92mok") == '<span class="ansi-fg-bg">ok</span>'


def test_progress_events_feed_the_bar_and_a_bounded_curve(project: Project, owner: Any) -> None:
    job = make_job(project, owner)
    lines = [
        json.dumps(
            {"event": "progress", "v": 1, "step": i, "max_steps": 2000, "loss": 3 - i / 1000}
        )
        for i in range(1, 1201)
    ]
    _note_progress(job, ("plain text", "{not json", *lines))
    assert job.progress["step"] == 1200 and job.progress["last_event"] == "progress"
    # Every logged step is kept (up to MAX_CURVE_POINTS; past it, every other one).
    assert [point[0] for point in job.loss_curve] == list(range(1, 1201))
    more = [
        json.dumps({"event": "progress", "v": 1, "step": i, "loss": 1.0}) for i in range(1201, 2101)
    ]
    _note_progress(job, more)
    assert 1000 <= len(job.loss_curve) <= 2000 and job.loss_curve[-1][0] == 2100


def test_cost_counts_each_started_minute_at_the_price_in_effect_for_it(
    project: Project, owner: Any
) -> None:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    start = timezone.now() - timedelta(minutes=10, seconds=1)
    FlavorPrice.objects.create(
        flavor=flavor, valid_from=start + timedelta(minutes=1), price_per_hour=Decimal("60")
    )
    FlavorPrice.objects.create(
        flavor=flavor,
        valid_from=start + timedelta(minutes=2, seconds=30),
        price_per_hour=Decimal("120"),
    )
    job = make_job(
        project, owner, gpu=2, started_at=start, finished_at=start + timedelta(minutes=3, seconds=1)
    )
    # 4 started minutes × 2 units: minute 0 at 2.80/h, minutes 1–2 at 60/h (the minute starting
    # at 2:00 began before the 2:30 change), minute 3 at 120/h.
    expected = (Decimal("2.80") + 60 * 2 + 120) * 2 / 60
    assert job_cost_estimate(job=job) == expected.quantize(Decimal("0.0001"))
    job.finished_at = start + timedelta(seconds=5)
    assert job_cost_estimate(job=job) == Decimal("0.0933")  # one minute at least, 2 × 2.80/60


def test_a_run_over_between_two_looks_still_shows_running_and_finalizing(
    project: Project, owner: Any
) -> None:
    began = timezone.now() - timedelta(seconds=10)
    job = make_job(project, owner, state=JobState.INITIALIZING, state_changed_at=began)
    seen = ObservedWorkload(
        kind=WorkloadKind.JOB,
        id=str(job.pk),
        phase=Phase.SUCCEEDED,
        started_at=began + timedelta(seconds=1),
        finished_at=began + timedelta(seconds=3),
        exit_code=0,
        push_attempt=1,
    )
    assert apply_observation(job, seen)
    history = list(job.events.order_by("at").values_list("state", "reason", "at"))
    assert history == [
        (JobState.RUNNING, "running", seen.started_at),
        (JobState.FINALIZING, "pushing rw volumes (attempt 1)", seen.finished_at),
        (JobState.DONE, "exit code 0", history[-1][2]),
    ]
    quick_timeout = make_job(project, owner, state=JobState.PENDING)
    apply_observation(
        quick_timeout,
        replace(seen, id=str(quick_timeout.pk), phase=Phase.FAILED, timed_out=True),
    )
    states = list(quick_timeout.events.order_by("at").values_list("state", flat=True))
    assert states == [JobState.RUNNING, JobState.TIMEOUT, JobState.INTERRUPTED]


def test_list_filters_sorts_and_escapes(
    owner_client: Client, project: Project, owner: Any, member: Any
) -> None:
    make_job(project, owner, name="<img src=x onerror=alert(1)>", labels={"team": "nlp"})
    make_job(project, member, name="other", state=JobState.FAILED)
    page = owner_client.get("/p/alpha/jobs/").content.decode()
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img src=x" not in page
    assert "other" in owner_client.get("/p/alpha/jobs/?state=FAILED").content.decode()
    assert "other" not in owner_client.get("/p/alpha/jobs/?label=team=nlp").content.decode()
    assert "other" not in owner_client.get("/p/alpha/jobs/?owner=owner").content.decode()
    fragment = owner_client.get("/p/alpha/jobs/?sort=name", HTTP_HX_REQUEST="true")
    assert fragment.content.decode().lstrip().startswith('<div id="job-table"')


def test_list_paginates(owner_client: Client, project: Project, owner: Any) -> None:
    Job.objects.bulk_create(
        Job(
            project=project,
            owner=owner,
            name=f"j{i}",
            image="x/y:1",
            flavor=Flavor.objects.get(name="ai1-1-cpu"),
        )
        for i in range(120)
    )
    page = owner_client.get("/p/alpha/jobs/?page=3").content.decode()
    assert "Page 3 of 3 (120 jobs)" in page


def test_detail_shows_tail_and_escaped_lines(
    owner_client: Client, project: Project, owner: Any
) -> None:
    job = make_job(project, owner, state=JobState.DONE, logs_archived=True, log_lines=2000)
    JobLogLine.objects.bulk_create(
        JobLogLine(job=job, run=1, seq=i, text=f"<b>line {i}</b>") for i in range(1, 2001)
    )
    JobEvent.objects.create(job=job, run=1, state=JobState.DONE, reason="exit code 0")
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    shown = re.findall(r"&lt;b&gt;line (\d+)&lt;/b&gt;", page)  # escaped, so counted here
    assert shown == [str(i) for i in range(1501, 2001)]  # the last 500, in order, no more
    assert "Showing the last 500 of 2000 lines" in page and 'data-testid="log-end"' in page
    assert "hx-trigger" not in page.split('id="job-status"')[1].split(">")[0]  # not polling
    more = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/?after=1998", HTTP_HX_REQUEST="true")
    body = more.content.decode()
    assert 'hx-swap-oob="beforeend:#log-lines"' in body and "line 1999" in body
    download = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/download/")
    text = b"".join(download.streaming_content).decode()
    assert text.count("\n") == 2000 and text.startswith("<b>line 1</b>\n")


def test_results_link_to_the_output_bucket(
    owner_client: Client, project: Project, owner: Any
) -> None:
    job = make_job(project, owner, volumes=["out@LOCAL/runs/1:/workspace/output:rw"])
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    assert 'href="/p/alpha/buckets/LOCAL/out/?prefix=runs%2F1%2F"' in page


def test_actions_and_their_refusals(
    owner_client: Client, project: Project, owner: Any, member: Any
) -> None:
    running = make_job(project, owner, state=JobState.RUNNING, launched_run=1)
    response = owner_client.post(f"/p/alpha/jobs/{running.pk}/delete/", follow=True)
    assert "Stop the job before deleting it." in response.content.decode()
    assert Job.objects.filter(pk=running.pk).exists()
    other = Client()
    other.force_login(member)
    denied = other.post(f"/p/alpha/jobs/{running.pk}/stop/", follow=True)
    assert "Only the job&#x27;s owner or a project manager" in denied.content.decode()
    assert owner_client.post(f"/p/alpha/jobs/{running.pk}/bogus/").status_code == 404


def test_form_errors_are_shown_and_nothing_saved(owner_client: Client, panel_s3: Any) -> None:
    response = owner_client.post(
        "/p/alpha/jobs/new/?tab=custom",
        {
            "tab": "custom",
            "c-image": "bad image",
            "c-flavor": "h100-1-gpu",
            "c-gpu": "9",
            "c-env": "NOEQUALS",
            "c-volumes": "nope",
        },
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "not a valid image reference" in page and "write KEY=value" in page
    assert not Job.objects.exists()


def test_a_new_form_shows_the_cost_of_what_it_starts_with(
    owner_client: Client, panel_s3: Any
) -> None:
    first = Flavor.objects.filter(enabled=True).first()
    assert first is not None and first.current_price is not None
    for tab in ("finetune", "custom"):
        page = owner_client.get(f"/p/alpha/jobs/new/?tab={tab}").content.decode()
        assert f"Estimated cost: <strong>{first.current_price:.2f} EUR/h</strong>" in page


def test_a_fine_tune_error_event_reads_as_its_message(project: Project, owner: Any) -> None:
    job = make_job(project, owner, state=JobState.RUNNING)
    last = json.dumps(
        {"event": "error", "v": 1, "kind": "config", "exit_code": 2, "message": "bad --rank"}
    )
    seen = ObservedWorkload(
        kind=WorkloadKind.JOB, id=str(job.pk), phase=Phase.FAILED, reason=f"exit code 2: {last}"
    )
    apply_observation(job, seen)
    assert (job.state, job.state_reason) == (JobState.FAILED, "exit code 2: bad --rank")
    other = make_job(project, owner, state=JobState.RUNNING)
    apply_observation(other, replace(seen, id=str(other.pk), reason="exit code 1: {not json"))
    assert other.state_reason == "exit code 1: {not json"


def test_push_conflicts_are_told_on_the_job_page(
    owner_client: Client, project: Project, owner: Any
) -> None:
    job = make_job(project, owner, state=JobState.FINALIZING)
    note = "pushed with 2 conflicts: output/a.txt, output/b.txt; the remote copies were kept"
    seen = ObservedWorkload(
        kind=WorkloadKind.JOB,
        id=str(job.pk),
        phase=Phase.SUCCEEDED,
        reason="exit code 0",
        push_attempt=1,
        push_note=note,
    )
    assert apply_observation(job, seen)
    assert (job.state, job.state_reason) == (JobState.DONE, f"exit code 0; {note}")
    assert job.events.get(state=JobState.DONE).reason == f"exit code 0; {note}"
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    assert "pushed with 2 conflicts: output/a.txt, output/b.txt" in page
