"""What the timeline says when a fine-tune saves its checkpoint on SIGTERM (issue 28): the
preset's `interrupted` event reads "stopped by <user> at step N" for a user's `job stop`, and
"evicted by Kueue (<Kueue's reason>) at step N" only for an eviction, whether its line is
collected after the requeue is seen or before it (the requeue then completes the entry)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.lifecycle import apply_observation, record_launch, record_state
from controlpanel.engine.logs import _store
from controlpanel.engine.models import JobEvent, JobRun
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.services import workload_stop
from controlpanel.engine.tasks import sweep_now
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from deploy.types import ObservedWorkload, Phase, WorkloadKind
from tests.controlpanel.queues.test_eviction_metering import beta_borrows
from tests.fixtures.cli import cli_as
from tests.fixtures.jobs import access_for, submit
from tests.fixtures.k8s import kueue_on

INTERRUPTED = (
    '{"event": "interrupted", "v": 1, "time": 1733130000.0, "step": 412, "signal": "SIGTERM", '
    '"checkpoint": "/workspace/output/checkpoints/step-000412"}'
)
KUEUE = "Preempted to accommodate a workload (UID: 7) due to reclamation within the cohort"
SAVED = "at step 412: its checkpoint is saved"


@pytest.fixture
def running(settings: Any, k8s_jobs: Any, project: Project, owner: Any) -> Job:
    """A preemptible fine-tune RUNNING on its pod under Kueue."""
    settings.QUEUE_ENGINE = "kueue"
    job = submit(project, owner, preemptible=True)
    admit_jobs(project_id=project.pk)
    job.refresh_from_db()
    record_launch(job)
    record_state(job, "RUNNING", "running")
    JobRun.objects.create(
        uid="pod-1",
        job=job,
        project=project,
        run=job.run,
        flavor=job.flavor,
        units=1,
        started_at=timezone.now() - timedelta(minutes=5),
    )
    return job


def requeue(job: Job) -> None:
    """Kueue preempts it: a fresh read sees the Job suspended with the Workload's reason."""
    back = ObservedWorkload(
        kind=WorkloadKind.JOB,
        id=str(job.pk),
        phase=Phase.QUEUED,
        project=job.project.slug,
        namespace=job.project.namespace,
        run=job.run,
        reason=f"preempted: {KUEUE}; back in Kueue queue ajuste, it resumes from its last "
        "checkpoint",
        evicted_at=timezone.now(),
    )
    assert apply_observation(job, back, fresh=True)
    job.refresh_from_db()


def milestones(job: Job) -> list[str]:
    found = JobEvent.objects.filter(job=job, reason__contains="at step").order_by("pk")
    return list(found.values_list("reason", flat=True))


@pytest.mark.django_db(transaction=True)
def test_a_users_job_stop_says_stopped_by_the_user(
    running: Job, owner: Any, owner_client: Any, live_server: Any
) -> None:
    result = cli_as(owner, live_server.url)("job", "stop", str(running.pk))
    assert result.exit_code == 0, result.output
    job = Job.objects.get(pk=running.pk)
    assert job.stop_requested and job.state == "INTERRUPTING"
    _store(job, [INTERRUPTED])
    assert milestones(job) == [f"stopped by owner {SAVED}"]
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    assert f"stopped by owner {SAVED}" in page and "evicted" not in page


@pytest.mark.django_db
def test_an_eviction_says_evicted_by_kueue_and_why(running: Job, owner_client: Any) -> None:
    requeue(running)
    _store(running, [INTERRUPTED])
    said = f"evicted by Kueue (preempted: {KUEUE}) {SAVED}"
    assert milestones(running) == [said]
    page = owner_client.get(f"/p/alpha/jobs/{running.pk}/").content.decode()
    assert "evicted by Kueue (preempted: Preempted to accommodate" in page
    assert "stopped by" not in page


@pytest.mark.django_db
def test_an_eviction_seen_after_its_line_gets_kueues_reason(running: Job) -> None:
    _store(running, [INTERRUPTED])  # the collector read the line before the requeue was seen
    assert milestones(running) == [f"evicted {SAVED}"]
    requeue(running)
    assert milestones(running) == [f"evicted by Kueue (preempted: {KUEUE}) {SAVED}"]


@pytest.mark.django_db
def test_a_stop_by_the_panel_says_its_reason(running: Job, owner: Any) -> None:
    job = workload_stop(
        access=access_for(running.project), user=owner, workload=running, reason="idle for 2 hours"
    )
    _store(job, [INTERRUPTED])
    assert milestones(job) == [f"stopped (idle for 2 hours) {SAVED}"]


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_the_requeue_the_sweep_sees_names_kueues_reason_for_that_job_only(
    k8s_cluster: Any,
    k8s_jobs: Any,
    settings: Any,
    project: Project,
    other_project: Project,
    owner: Any,
) -> None:
    """Through the emulator's Kueue: both of beta's fine-tunes printed `interrupted` before
    anything was seen (the collector is ahead); alpha reclaims its GPU, the sweep sees one of
    them requeued, and only that one's entry names Kueue's reason."""
    kueue_on(k8s_cluster, settings)
    theirs = beta_borrows(k8s_cluster, project, other_project, owner)
    for job in Job.objects.filter(pk__in=[j.pk for j in theirs]):
        _store(job, [INTERRUPTED])
    ours = submit(project, owner, name="alpha-0")
    admit_jobs(project_id=project.pk)
    reconcile(str(ours.pk))
    sweep_now()
    [requeued] = Job.objects.filter(pk__in=[j.pk for j in theirs], state="QUEUED")
    [still] = Job.objects.filter(pk__in=[j.pk for j in theirs], state="RUNNING")
    [said] = milestones(requeued)
    assert said.startswith("evicted by Kueue (preempted: ") and said.endswith(SAVED), said
    assert "reclamation within the cohort" in said
    assert milestones(still) == [f"evicted {SAVED}"]  # not its requeue: left as it was
