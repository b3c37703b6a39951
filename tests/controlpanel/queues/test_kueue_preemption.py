"""The issue's proof on the emulator's Kueue (QUEUE_ENGINE=kueue): two projects of 4 GPUs in
one cohort; A is idle and B runs eight 1-GPU jobs, four of them on A's lent GPUs; A submits
four: four of B's are preempted and shown QUEUED with Kueue's reason (not FAILED), A's run. The
emulator validates every Kueue object the panel writes against Kueue v0.19.2's CRDs."""

from __future__ import annotations

import itertools
import math
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db.models import F

from controlpanel.billing.models import Line
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.models import JobRun
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.queues.services import queues_reconcile
from deploy import names
from tests.fixtures.jobs import submit
from tests.fixtures.k8s import kueue_on

MINUTE = timedelta(minutes=1)
pytestmark = [pytest.mark.k8s, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cohort(
    k8s_cluster: Any, k8s_jobs: Any, settings: Any, project: Project, other_project: Project
) -> Any:
    kueue = kueue_on(k8s_cluster, settings)
    Project.objects.filter(pk__in=[project.pk, other_project.pk]).update(gpu_quota=4)
    assert queues_reconcile() == ["ajuste-alpha", "ajuste-beta"]
    return kueue


def launch(cluster: Any, project: Project, user: Any, count: int) -> list[Job]:
    jobs = [submit(project, user, name=f"{project.slug}-{i}") for i in range(count)]
    assert len(admit_jobs(project_id=project.pk)) == count  # Kueue queues, not the panel
    for job in jobs:
        reconcile(str(job.pk))
    for job in jobs:
        for pod in cluster.pods_of(project.namespace, names.job_name(job_ref(job))):
            if not pod["metadata"].get("deletionTimestamp"):
                cluster.kubelet.run(project.namespace, pod["metadata"]["name"])
    sweep_now()
    return jobs


def states(jobs: list[Job]) -> list[tuple[str, str]]:
    rows = Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("created_at")
    return [(j.state, j.state_reason) for j in rows]


def test_reclaimed_quota_preempts_the_borrower_back_to_queued(
    k8s_cluster: Any, cohort: Any, project: Project, other_project: Project, owner: Any
) -> None:
    theirs = launch(k8s_cluster, other_project, owner, 8)
    assert [s for s, _ in states(theirs)] == ["RUNNING"] * 8  # 4 borrowed from alpha
    ours = launch(k8s_cluster, project, owner, 4)
    assert [s for s, _ in states(ours)] == ["RUNNING"] * 4
    after = states(theirs)
    queued = [reason for state, reason in after if state == "QUEUED"]
    assert len(queued) == 4 and [s for s, _ in after].count("RUNNING") == 4
    assert all(r.startswith("preempted: ") for r in queued), queued
    assert all("reclamation within the cohort" in r for r in queued), queued
    assert "FAILED" not in {s for s, _ in after}
    preempted = [j.pk for j in Job.objects.filter(pk__in=[j.pk for j in theirs], state="QUEUED")]
    runs = JobRun.objects.filter(job_id__in=preempted)
    assert runs.count() == 4  # one pod run each, metered
    assert list(runs.filter(finished_at=None)) == []  # no minute billed while it waits


def _pod_ends(cluster: Any, jobs: list[Job]) -> None:
    """Every live pod of `jobs` runs to its end (exit 0), then the panel looks."""
    for job in jobs:
        for pod in cluster.pods_of(job.project.namespace, names.job_name(job_ref(job))):
            if (pod.get("status") or {}).get("phase") == "Running":
                cluster.kubelet.finish(job.project.namespace, pod["metadata"]["name"])
    sweep_now()


def _billed(run: JobRun) -> list[tuple[datetime, datetime]]:
    """The run's usage lines as the spans of time they bill ([first minute's start, last's end))."""
    spans = []
    for line in Line.objects.filter(run=run, period=F("of_period")).order_by("first_minute"):
        first = line.run_start + line.first_minute * MINUTE
        spans.append((first, first + line.minutes * MINUTE))
    return spans


def test_an_evicted_pod_is_billed_to_its_end_and_no_minute_twice(
    k8s_cluster: Any, cohort: Any, project: Project, other_project: Project, owner: Any
) -> None:
    # The panel sees the cluster late: the cluster's clock is 30 minutes behind the panel's,
    # so a run closed when the panel noticed the requeue would bill some 23 minutes too many.
    k8s_cluster.store.clock_offset = -timedelta(minutes=30)
    theirs = launch(k8s_cluster, other_project, owner, 8)
    k8s_cluster.advance(7 * 60 + 20)  # beta's pods run 7 min 20 s
    before = k8s_cluster.store.now().replace(microsecond=0)  # the API's times are in seconds
    ours = launch(k8s_cluster, project, owner, 4)  # Kueue evicts four of beta's now
    after = k8s_cluster.store.now()
    preempted = list(Job.objects.filter(pk__in=[j.pk for j in theirs], state="QUEUED"))
    assert len(preempted) == 4
    evicted = list(JobRun.objects.filter(job__in=preempted).order_by("started_at"))
    assert len(evicted) == 4
    for run in evicted:
        assert run.finished_at is not None and before <= run.finished_at <= after, (
            run.finished_at,
            before,
            after,
        )
        spans = _billed(run)
        # Each started minute in full: 7 min 20 s of running are 8 minutes, the last of them
        # starting before the pod ended, none after it.
        assert sum(int((b - a) / MINUTE) for a, b in spans) == 8, spans
        assert spans[0][0] == run.started_at and spans[-1][1] - MINUTE < run.finished_at
    # Alpha's work ends; Kueue gives beta its reclaimed GPUs back: the preempted jobs run again
    # as new pods, billed from their own start.
    k8s_cluster.advance(60)
    _pod_ends(k8s_cluster, ours)
    for job in preempted:
        reconcile(str(job.pk))
        for pod in k8s_cluster.pods_of(job.project.namespace, names.job_name(job_ref(job))):
            if not pod["metadata"].get("deletionTimestamp") and not pod.get("status", {}).get(
                "containerStatuses"
            ):
                k8s_cluster.kubelet.run(job.project.namespace, pod["metadata"]["name"])
    sweep_now()
    assert [s for s, _ in states(preempted)] == ["RUNNING"] * 4
    k8s_cluster.advance(3 * 60)
    _pod_ends(k8s_cluster, preempted)
    assert [s for s, _ in states(preempted)] == ["DONE"] * 4
    for job in preempted:
        first, second = JobRun.objects.filter(job=job).order_by("started_at")
        assert first.finished_at is not None and second.started_at is not None
        assert second.started_at >= first.finished_at  # the GPUs were not billed meanwhile
        spans = sorted(_billed(first) + _billed(second))
        # No minute twice: the two pods' billed spans never overlap, and together they are
        # exactly each pod's started minutes (8 before the eviction, 3 or so after).
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
        again = math.ceil((second.finished_at - second.started_at) / MINUTE)
        assert again >= 3 and [int((b - a) / MINUTE) for a, b in spans] == [8, again], spans
        assert Line.objects.filter(run__job=job).exclude(period=F("of_period")).count() == 0
