"""The issue's proof on the emulator's Kueue (QUEUE_ENGINE=kueue): two projects of 4 GPUs in
one cohort; A is idle and B runs eight 1-GPU jobs, four of them on A's lent GPUs; A submits
four: four of B's are preempted and shown QUEUED with Kueue's reason (not FAILED), A's run. The
emulator validates every Kueue object the panel writes against Kueue v0.19.2's CRDs."""

from __future__ import annotations

from typing import Any

import pytest

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
from tests.fixtures.k8s_emulator import crds

pytestmark = [pytest.mark.k8s, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cohort(
    k8s_cluster: Any, k8s_jobs: Any, settings: Any, project: Project, other_project: Project
) -> Any:
    missing = crds.missing(crds.KUEUE)
    if missing:
        pytest.skip(missing)
    settings.QUEUE_ENGINE = "kueue"
    kueue = k8s_cluster.install_kueue()
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
