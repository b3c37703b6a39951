"""An evicted pod is metered to its own end (issue 28): Kueue's requeue is seen up to a sweep
late, but the run it ended closes when its pod did. A pod still saving its checkpoint stays
metered until it ends; one gone without its end seen ends at Kueue's eviction (its Workload's
Evicted time, read by the observation of the suspended Job)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db.models import F, Sum
from django.utils import timezone

from controlpanel.billing.models import Line
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.lifecycle import apply_observation, record_state
from controlpanel.engine.models import JobRun
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.queues.services import queues_reconcile
from deploy import names
from deploy.kubernetes.observe import JobObjects, observe_job
from deploy.types import ObservedWorkload, Phase, WorkloadKind, WorkloadRef
from tests.fixtures.jobs import submit
from tests.fixtures.k8s import kueue_on

REASON = "preempted: project alpha reclaimed its quota; back in Kueue queue ajuste, it resumes"


@pytest.fixture
def running(settings: Any, k8s_jobs: Any, project: Project, owner: Any) -> tuple[Job, JobRun]:
    """A job RUNNING for ten minutes on pod-1 under Kueue."""
    settings.QUEUE_ENGINE = "kueue"
    job = submit(project, owner, preemptible=True)
    admit_jobs(project_id=project.pk)
    job.refresh_from_db()
    record_state(job, "RUNNING", "running")
    run = JobRun.objects.create(
        uid="pod-1",
        job=job,
        project=project,
        run=job.run,
        flavor=job.flavor,
        units=1,
        started_at=timezone.now().replace(microsecond=0) - timedelta(minutes=10),
    )
    return job, run


def requeued(job: Job, **seen: Any) -> ObservedWorkload:
    return ObservedWorkload(
        kind=WorkloadKind.JOB,
        id=str(job.pk),
        phase=Phase.QUEUED,
        project=job.project.slug,
        namespace=job.project.namespace,
        run=job.run,
        reason=REASON,
        **seen,
    )


def billed_minutes(run: JobRun) -> int:
    lines = Line.objects.filter(run=run, period=F("of_period"))
    return int(lines.aggregate(m=Sum("minutes"))["m"] or 0)


@pytest.mark.django_db
def test_a_pod_gone_before_the_requeue_is_seen_is_billed_to_kueues_eviction(
    running: tuple[Job, JobRun],
) -> None:
    job, run = running
    evicted = run.started_at + timedelta(minutes=6, seconds=30)  # 3.5 minutes before "now"
    assert apply_observation(job, requeued(job, evicted_at=evicted), fresh=True)
    run.refresh_from_db()
    job.refresh_from_db()
    assert job.state == "QUEUED"
    assert run.finished_at == evicted  # not when the panel saw it
    assert billed_minutes(run) == 7  # 6 min 30 s: seven started minutes, none after


@pytest.mark.django_db
def test_a_pod_still_saving_its_checkpoint_is_metered_until_it_ends(
    running: tuple[Job, JobRun],
) -> None:
    job, run = running
    evicted = run.started_at + timedelta(minutes=9)
    terminating = requeued(job, evicted_at=evicted, run_uid="pod-1", started_at=run.started_at)
    assert apply_observation(job, terminating, fresh=True)
    run.refresh_from_db()
    assert run.finished_at is None  # it still holds its GPU: billed as it runs
    ended = evicted + timedelta(seconds=40)  # its checkpoint saved, it exits on SIGTERM
    apply_observation(
        job,
        requeued(
            job,
            evicted_at=evicted,
            run_uid="pod-1",
            started_at=run.started_at,
            finished_at=ended,
            exit_code=143,
        ),
        fresh=True,
    )
    run.refresh_from_db()
    assert run.finished_at == ended
    apply_observation(job, requeued(job, evicted_at=evicted), fresh=True)  # then the pod goes
    run.refresh_from_db()
    assert run.finished_at == ended and billed_minutes(run) == 10


@pytest.mark.django_db
def test_an_eviction_in_the_clusters_future_is_billed_to_the_panels_now(
    running: tuple[Job, JobRun],
) -> None:
    """A cluster clock ahead of the panel's never bills a minute past the panel's now."""
    job, run = running
    before = timezone.now()
    ahead = before + timedelta(hours=1)
    apply_observation(job, requeued(job, evicted_at=ahead), fresh=True)
    run.refresh_from_db()
    assert run.finished_at is not None and before <= run.finished_at <= timezone.now()


def _workload(evicted: str | None) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "waiting",
            "lastTransitionTime": "2026-12-05T10:00:00Z",
        },
    ]
    if evicted:
        conditions += [
            {
                "type": "Evicted",
                "status": "True",
                "reason": "Preempted",
                "message": "Preempted to accommodate a workload (UID: 1) due to reclamation "
                "within the cohort",
                "lastTransitionTime": evicted,
            },
            {
                "type": "Preempted",
                "status": "True",
                "reason": "InCohortReclamation",
                "message": "Preempted to accommodate a workload (UID: 1) due to reclamation "
                "within the cohort",
                "lastTransitionTime": evicted,
            },
        ]
    return {"metadata": {"name": "job-x-1"}, "status": {"conditions": conditions}}


def _suspended_job() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "job-x",
            "namespace": "ajuste-alpha",
            "uid": "u1",
            "labels": {"kueue.x-k8s.io/queue-name": "ajuste"},
        },
        "spec": {"suspend": True},
        "status": {"startTime": "2026-12-05T09:50:00Z"},
    }


def test_the_observation_of_an_evicted_job_carries_kueues_eviction_time() -> None:
    ref = WorkloadRef(WorkloadKind.JOB, "alpha", "ajuste-alpha", "x", 1)
    seen = observe_job(
        ref, JobObjects(job=_suspended_job(), workload=_workload("2026-12-05T10:07:31Z"))
    )
    assert seen.phase is Phase.QUEUED and seen.reason.startswith("preempted: ")
    assert seen.evicted_at == datetime(2026, 12, 5, 10, 7, 31, tzinfo=UTC)
    waiting = observe_job(ref, JobObjects(job=_suspended_job(), workload=_workload(None)))
    assert waiting.phase is Phase.QUEUED and waiting.evicted_at is None  # never admitted


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_a_pod_terminating_after_its_eviction_shows_kueues_reason_and_is_metered(
    k8s_cluster: Any,
    k8s_jobs: Any,
    settings: Any,
    project: Project,
    other_project: Project,
    owner: Any,
) -> None:
    """Through the emulator's Kueue: the evicted pod saves its checkpoint (it ignores SIGTERM
    for its grace period), and meanwhile the job says why it waits and is still metered."""
    kueue_on(k8s_cluster, settings)
    theirs = beta_borrows(k8s_cluster, project, other_project, owner)
    k8s_cluster.kubelet.ignore_sigterm = True
    ours = submit(project, owner, name="alpha-0")
    admit_jobs(project_id=project.pk)
    reconcile(str(ours.pk))
    sweep_now()
    [preempted] = Job.objects.filter(pk__in=[j.pk for j in theirs], state="QUEUED")
    assert preempted.state_reason.startswith("preempted: "), preempted.state_reason
    assert "reclamation within the cohort" in preempted.state_reason
    [run] = JobRun.objects.filter(job=preempted)
    assert run.finished_at is None  # its pod still runs (terminating): metered
    [dying] = k8s_cluster.pods_of(other_project.namespace, names.job_name(job_ref(preempted)))
    k8s_cluster.kubelet.stop(other_project.namespace, dying["metadata"]["name"], 143)
    sweep_now()
    run.refresh_from_db()
    assert run.finished_at is not None and run.started_at <= run.finished_at <= timezone.now()


@pytest.mark.django_db
def test_an_eviction_older_than_the_pod_is_not_its_end(running: tuple[Job, JobRun]) -> None:
    """An Evicted time from before this pod started (a stale condition) never cuts its run
    to a minute: its end is then the panel's now."""
    job, run = running
    before = timezone.now()
    stale = run.started_at - timedelta(minutes=1)
    apply_observation(job, requeued(job, evicted_at=stale), fresh=True)
    run.refresh_from_db()
    assert run.finished_at is not None and before <= run.finished_at <= timezone.now()
    assert billed_minutes(run) >= 10


def beta_borrows(cluster: Any, project: Project, other_project: Project, owner: Any) -> list[Job]:
    """One GPU each; beta's two preemptible jobs run, the second on alpha's idle GPU (borrowed
    through the cohort), and the sweep has seen them running."""
    Project.objects.filter(pk__in=[project.pk, other_project.pk]).update(gpu_quota=1)
    queues_reconcile()
    theirs = [submit(other_project, owner, name=f"beta-{i}", preemptible=True) for i in range(2)]
    admit_jobs(project_id=other_project.pk)
    for job in theirs:
        reconcile(str(job.pk))
        pod = cluster.pod_of(other_project.namespace, names.job_name(job_ref(job)))
        cluster.kubelet.run(other_project.namespace, pod)
    sweep_now()
    return theirs
