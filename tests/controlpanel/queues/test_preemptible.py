"""A job's `preemptible` option (issue 28): asked for by the API, the form and the CLI, on by
default for the fine-tune preset only, stored, and mapped to Kueue's preemptible priority
(else batch). With the builtin queue the form says that borrowing and preemption need Kueue."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.lifecycle import apply_observation, record_state
from controlpanel.engine.logs import _store
from controlpanel.engine.models import JobEvent, JobRun
from controlpanel.jobs.forms import CustomJobForm, FinetuneForm
from controlpanel.jobs.models import Job
from controlpanel.jobs.request import job_request
from controlpanel.jobs.validation import _preemptible
from controlpanel.projects.models import Project
from deploy.types import ObservedWorkload, Phase, WorkloadKind
from tests.fixtures.cli import cli_as, ok_json
from tests.fixtures.jobs import submit

BODY = {
    "image": "registry.example.com/train:1",
    "command": ["python", "train.py"],
    "flavor": "h100-1-gpu",
    "gpu": 1,
}
URL = "/api/v1/jobs/?project=alpha"
FORM = {"tab": "custom", "c-image": "x/y:1", "c-flavor": "h100-1-gpu", "c-gpu": "1"}


@pytest.fixture
def kueue_engine(settings: Any, k8s_jobs: Any) -> Any:
    settings.QUEUE_ENGINE = "kueue"
    return k8s_jobs


def tier(job_id: str) -> tuple[str | None, bool]:
    request = job_request(Job.objects.get(pk=job_id))
    return request.priority_class, request.preemptible


def test_the_api_takes_preemptible_and_kueue_gets_its_priority(
    owner_api: Any, kueue_engine: Any
) -> None:
    plain = owner_api.post(URL, BODY, "json").json()
    asked = owner_api.post(URL, BODY | {"preemptible": True}, "json").json()
    assert (plain["preemptible"], asked["preemptible"]) == (False, True)
    assert owner_api.get(f"/api/v1/jobs/{asked['id']}/?project=alpha").json()["preemptible"]
    assert tier(plain["id"]) == ("ajuste-batch", False)
    assert tier(asked["id"]) == ("ajuste-preemptible", True)


def test_a_bad_value_is_refused_under_preemptible_and_saves_nothing(
    owner_api: Any, kueue_engine: Any
) -> None:
    answer = owner_api.post(URL, BODY | {"preemptible": [1]}, "json")
    assert answer.status_code == 400
    assert list(answer.json()) == ["preemptible"]
    assert Job.objects.count() == 0


def test_the_fine_tune_is_preemptible_unless_it_says_no() -> None:
    assert _preemptible(None, True) is True
    assert _preemptible(None, False) is False
    assert _preemptible(False, True) is False
    assert (
        FinetuneForm().fields["preemptible"].initial,
        CustomJobForm().fields["preemptible"].initial,
    ) == (True, False)


def test_builtin_preemptible_changes_nothing(owner_api: Any, k8s_jobs: Any) -> None:
    asked = owner_api.post(URL, BODY | {"preemptible": True}, "json").json()
    assert asked["preemptible"] is True  # stored: it applies once the site runs Kueue
    assert tier(asked["id"]) == (None, False)


def test_the_form_takes_it_and_says_what_needs_kueue(
    owner_client: Any, k8s_jobs: Any, settings: Any
) -> None:
    page = owner_client.get("/p/alpha/jobs/new/?tab=custom").content.decode()
    assert "Borrowing and preemption need Kueue (QUEUE_ENGINE=kueue)" in page
    assert (
        owner_client.post(
            "/p/alpha/jobs/new/?tab=custom", FORM | {"c-preemptible": "on"}
        ).status_code
        == 302
    )
    assert owner_client.post("/p/alpha/jobs/new/?tab=custom", FORM).status_code == 302
    assert [j.preemptible for j in Job.objects.order_by("created_at")] == [True, False]
    settings.QUEUE_ENGINE = "kueue"
    page = owner_client.get("/p/alpha/jobs/new/").content.decode()
    assert "need Kueue" not in page
    assert re.search(r'<input[^>]*name="ft-preemptible"[^>]*checked', page)


@pytest.mark.django_db(transaction=True)
def test_the_cli_takes_preemptible(
    live_server: Any, owner: Any, panel_s3: Any, k8s_jobs: Any
) -> None:
    run = cli_as(owner, live_server.url)
    on = ok_json(
        run("job", "run", "--flavor", "h100-1-gpu", "--preemptible", "-o", "json", "x/y:1")
    )
    off = ok_json(
        run("job", "run", "--flavor", "h100-1-gpu", "--no-preemptible", "-o", "json", "x/y:1")
    )
    assert (on["preemptible"], off["preemptible"]) == (True, False)


# -- the cap on evictions ----------------------------------------------------------------------


def evict(job: Job, pod: str) -> bool:
    """The job RUNNING on `pod`, then Kueue takes it back to the queue (a fresh read)."""
    record_state(job, "RUNNING", "running")
    JobRun.objects.create(
        uid=pod,
        job=job,
        project=job.project,
        run=job.run,
        flavor=job.flavor,
        units=1,
        started_at=timezone.now() - timedelta(minutes=5),
    )
    back = ObservedWorkload(
        kind=WorkloadKind.JOB,
        id=str(job.pk),
        phase=Phase.QUEUED,
        project=job.project.slug,
        namespace=job.project.namespace,
        run=job.run,
        reason="preempted: project beta reclaimed its quota",
    )
    return apply_observation(job, back, fresh=True)


@pytest.mark.django_db
def test_past_the_cap_on_evictions_the_job_fails_with_the_reason(
    kueue_engine: Any, project: Project, owner: Any, settings: Any
) -> None:
    settings.QUEUE_MAX_EVICTIONS = 2
    job = submit(project, owner, preemptible=True)
    admit_jobs(project_id=project.pk)
    job.refresh_from_db()
    for pod in ("pod-1", "pod-2"):  # up to the cap: back to the queue each time
        assert evict(job, pod)
        job.refresh_from_db()
        assert job.state == "QUEUED"
    assert evict(job, "pod-3")
    job.refresh_from_db()
    assert job.state == "FAILED"
    assert job.state_reason == (
        "evicted 3 times, more than the site allows a run (QUEUE_MAX_EVICTIONS=2); the last "
        "time: preempted: project beta reclaimed its quota"
    )
    assert not JobRun.objects.filter(job=job, finished_at=None).exists()


@pytest.mark.django_db
def test_a_cap_of_zero_fails_the_first_eviction(
    kueue_engine: Any, project: Project, owner: Any, settings: Any
) -> None:
    settings.QUEUE_MAX_EVICTIONS = 0
    job = submit(project, owner, preemptible=True)
    admit_jobs(project_id=project.pk)
    job.refresh_from_db()
    assert evict(job, "pod-1")
    job.refresh_from_db()
    assert job.state == "FAILED" and job.state_reason.startswith("evicted 1 time, more than")


# -- history -----------------------------------------------------------------------------------

STOPPED = (
    '{"event": "interrupted", "v": 1, "time": 1733130000.0, "step": 412, "signal": "SIGTERM", '
    '"checkpoint": "/workspace/output/checkpoints/step-000412"}'
)
RESUMED = (
    '{"event": "resumed", "v": 1, "time": 1733130600.0, "step": 412, '
    '"checkpoint": "/workspace/output/checkpoints/step-000412"}'
)


@pytest.mark.django_db
def test_the_timeline_says_where_it_was_evicted_and_resumed(
    kueue_engine: Any, project: Project, owner: Any, owner_client: Any
) -> None:
    job = submit(project, owner, preemptible=True)
    _store(job, ["step 411", STOPPED, '{"event": "interrupted", "v": 1}', RESUMED, "step 413"])
    said = list(
        JobEvent.objects.filter(job=job, reason__contains="step").values_list("reason", flat=True)
    )
    assert said == ["evicted at step 412: its checkpoint is saved", "resumed from step 412"]
    page = owner_client.get(f"/p/{project.slug}/jobs/{job.pk}/").content.decode()
    assert "evicted at step 412" in page and "resumed from step 412" in page
