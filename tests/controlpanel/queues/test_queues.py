"""QUEUE_ENGINE (issue 28): the setting and its check, Kueue's configuration reconciled from the
panel's projects and flavors (validated by the emulator against Kueue v0.19.2's CRDs), jobs
labelled for their project's LocalQueue and priority, and the panel's own admission off for
Kueue (budget holds stay). The builtin engine's admission tests are unchanged."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.utils import timezone

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import project_request
from controlpanel.engine.lifecycle import apply_observation, record_state
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.request import job_request
from controlpanel.notebooks.driver import notebook_request
from controlpanel.notebooks.models import Notebook
from controlpanel.projects.models import Project
from controlpanel.queues.checks import queue_engine_problems
from controlpanel.queues.models import ProjectQueue
from controlpanel.queues.services import queues_reconcile
from deploy.types import ObservedWorkload, Phase, WorkloadKind
from tests.fixtures.jobs import submit
from tests.fixtures.k8s_emulator import crds

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"


@pytest.fixture
def kueue_engine(settings: Any, cluster: Any) -> None:
    settings.QUEUE_ENGINE = "kueue"


@pytest.fixture
def cluster(k8s_jobs: Any) -> Any:
    """The emulator as the backend (custom images need a cluster; admission asks it)."""
    return k8s_jobs


# -- the setting -------------------------------------------------------------------------------


def test_kueue_with_the_local_backend_is_refused(settings: Any) -> None:
    settings.QUEUE_ENGINE, settings.COMPUTE_BACKEND = "kueue", "local"
    assert queue_engine_problems() == [
        "QUEUE_ENGINE=kueue with COMPUTE_BACKEND=local: Kueue runs in a Kubernetes cluster, and "
        "nothing would admit this backend's work"
    ]
    assert "ajuste.E120" in {error.id for error in run_checks()}
    settings.COMPUTE_BACKEND = "kubernetes"
    assert queue_engine_problems() == []
    settings.QUEUE_ENGINE, settings.COMPUTE_BACKEND = "builtin", "local"
    assert queue_engine_problems() == []


def test_check_command_fails_naming_the_fix(settings: Any) -> None:
    settings.QUEUE_ENGINE, settings.COMPUTE_BACKEND = "kueue", "local"
    settings.AJUSTE_LOCAL_BACKEND_TRUSTED = True  # only this check's error
    with pytest.raises(SystemCheckError, match=r"(?s)ajuste.E120.*HINT:.*QUEUE_ENGINE=builtin"):
        call_command("check")


# -- jobs and admission ------------------------------------------------------------------------


@pytest.mark.django_db
def test_builtin_engine_keeps_the_projects_own_queue_name(
    cluster: Any, project: Project, owner: Any
) -> None:
    project.kueue_queue = "team-queue"
    project.save()
    request = job_request(submit(project, owner))
    assert (request.queue_name, request.priority_class, request.preemptible) == (
        "team-queue",
        None,
        False,
    )


@pytest.mark.django_db
def test_with_kueue_a_job_goes_to_the_projects_local_queue_at_batch_priority(
    kueue_engine: None, project: Project, owner: Any
) -> None:
    project.kueue_queue = "ignored"
    project.save()
    request = job_request(submit(project, owner))
    assert (request.queue_name, request.priority_class, request.preemptible) == (
        "ajuste",
        "ajuste-batch",
        False,
    )


@pytest.mark.django_db
def test_with_kueue_the_panel_admits_past_the_project_quota(
    kueue_engine: None, project: Project, owner: Any
) -> None:
    project.gpu_quota = 1
    project.save()
    jobs = [submit(project, owner) for _ in range(3)]
    assert sorted(admit_jobs(project_id=project.pk)) == sorted(str(j.pk) for j in jobs)


@pytest.mark.django_db
def test_builtin_engine_still_holds_the_second_job(
    cluster: Any, project: Project, owner: Any
) -> None:
    project.gpu_quota = 1
    project.save()
    first, second = submit(project, owner), submit(project, owner)
    assert admit_jobs(project_id=project.pk) == [str(first.pk)]
    second.refresh_from_db()
    assert second.state == "QUEUED" and "GPU" in second.state_reason


@pytest.mark.django_db
def test_with_kueue_a_budget_hold_still_holds(
    kueue_engine: None, project: Project, owner: Any, monkeypatch: Any
) -> None:
    from controlpanel.engine import admission

    monkeypatch.setattr(admission, "hold_reason", lambda project: "Budget reached")
    job = submit(project, owner)
    assert admit_jobs(project_id=project.pk) == []
    job.refresh_from_db()
    assert job.state == "QUEUED" and job.state_reason.startswith("Budget reached")


@pytest.mark.django_db
def test_namespace_quota_leaves_room_for_borrowing(
    kueue_engine: None, project: Project, other_project: Project
) -> None:
    Project.objects.filter(pk__in=[project.pk, other_project.pk]).update(gpu_quota=4)
    project.refresh_from_db()
    assert project_request(project).gpu_quota == 8  # the cohort's GPUs: no borrowing limit
    ProjectQueue.objects.create(project=project, borrowing_limit=2)
    project.refresh_from_db()
    assert project_request(project).gpu_quota == 6


@pytest.mark.django_db
def test_builtin_namespace_quota_is_the_project_quota(
    project: Project, other_project: Project
) -> None:
    ProjectQueue.objects.create(project=project, borrowing_limit=2)
    assert project_request(project).gpu_quota == project.gpu_quota


# -- on the emulator ---------------------------------------------------------------------------


@pytest.fixture
def kueue(k8s_cluster: Any, kueue_engine: None) -> Any:
    missing = crds.missing(crds.KUEUE)
    if missing:
        pytest.skip(missing)
    return k8s_cluster.install_kueue()


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_reconcile_writes_each_projects_queue_and_follows_changes(
    k8s_cluster: Any, kueue: Any, project: Project, other_project: Project
) -> None:
    assert queues_reconcile() == ["ajuste-alpha", "ajuste-beta"]
    queue = k8s_cluster.get("clusterqueues", None, "ajuste-alpha")
    gpus = queue["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]
    assert gpus["nominalQuota"] == project.gpu_quota and "borrowingLimit" not in gpus
    local = k8s_cluster.get("localqueues", "ajuste-beta", "ajuste")
    assert local["spec"]["clusterQueue"] == "ajuste-beta"
    ProjectQueue.objects.create(project=project, borrowing_limit=0, fair_sharing_weight=3)
    queues_reconcile()
    queue = k8s_cluster.get("clusterqueues", None, "ajuste-alpha")
    assert queue["spec"]["fairSharing"] == {"weight": 3}
    assert queue["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["borrowingLimit"] == 0
    other_project.delete()
    assert queues_reconcile() == ["ajuste-alpha"]
    assert k8s_cluster.get("clusterqueues", None, "ajuste-beta") is None


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_builtin_engine_writes_nothing_to_kueue(
    k8s_cluster: Any, k8s_jobs: Any, project: Project
) -> None:
    assert queues_reconcile() == []
    assert k8s_cluster.list("clusterqueues") == []


@pytest.mark.django_db
def test_a_notebook_goes_to_the_local_queue_at_interactive_priority_with_kueue_only(
    settings: Any, project: Project, owner: Any
) -> None:
    notebook = Notebook.objects.create(
        project=project,
        owner=owner,
        name="explore",
        image="quay.io/jupyter/minimal-notebook:python-3.12",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="h100-1-gpu"),
        gpu=1,
    )
    request = notebook_request(notebook)
    assert (request.queue_name, request.priority_class) == (None, None)
    settings.QUEUE_ENGINE = "kueue"
    request = notebook_request(notebook)
    assert (request.queue_name, request.priority_class) == ("ajuste", "ajuste-interactive")


@pytest.mark.django_db
def test_a_run_taken_back_to_the_queue_stops_being_metered(
    cluster: Any, project: Project, owner: Any
) -> None:
    job = submit(project, owner)
    admit_jobs(project_id=project.pk)
    job.refresh_from_db()
    record_state(job, "RUNNING", "running")
    started = timezone.now() - timedelta(minutes=5)
    run = JobRun.objects.create(
        uid="pod-1",
        job=job,
        project=project,
        run=job.run,
        flavor=job.flavor,
        units=1,
        started_at=started,
    )
    back = ObservedWorkload(
        kind=WorkloadKind.JOB,
        id=str(job.pk),
        phase=Phase.QUEUED,
        project=project.slug,
        namespace=project.namespace,
        run=job.run,
        reason="preempted: reclaimed; back in Kueue queue ajuste",
    )
    assert not apply_observation(job, back)  # a listing's QUEUED: only a fresh read tells
    run.refresh_from_db()
    assert run.finished_at is None
    assert apply_observation(job, back, fresh=True)
    job.refresh_from_db()
    run.refresh_from_db()
    assert job.state == "QUEUED" and run.finished_at is not None and run.finished_at >= started
