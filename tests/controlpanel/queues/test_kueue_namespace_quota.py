"""Under Kueue the namespace's ResourceQuota must not refuse what Kueue admitted on borrowed
capacity (issue 28): a project borrowing idle GPUs also needs their CPU and memory beyond its
own CPU and memory quotas. The emulator enforces ResourceQuota at pod creation, as a real API
server does, and plays Kueue (borrowing in the cohort, CPU and memory included)."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.engine.backend import ensure_project
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.queues.selectors import namespace_cpu_memory_quotas
from controlpanel.queues.services import queues_reconcile
from deploy.manifests.projects import QUOTA_NAME
from tests.controlpanel.queues.test_kueue_positions import launch
from tests.fixtures.k8s import kueue_on

pytestmark = [pytest.mark.k8s, pytest.mark.django_db(transaction=True)]


def quota_hard(cluster: Any, project: Project) -> dict[str, str]:
    return cluster.get("resourcequotas", project.namespace, QUOTA_NAME)["spec"]["hard"]


def test_a_borrowing_project_gets_the_cpu_and_memory_of_what_it_borrows(
    k8s_cluster: Any,
    k8s_jobs: Any,
    settings: Any,
    project: Project,
    other_project: Project,
    owner: Any,
) -> None:
    kueue_on(k8s_cluster, settings)
    # Each project: 4 GPUs, and CPU and memory for four 1-GPU jobs (h100-1-gpu's 30 vCPU and
    # 200 GiB a unit, and the sidecars' share), so six need what beta borrows of alpha's.
    Project.objects.filter(pk__in=[project.pk, other_project.pk]).update(
        gpu_quota=4, cpu_quota=124, memory_gib_quota=808
    )
    queues_reconcile()
    for p in (project, other_project):
        assert quota_hard(k8s_cluster, p)["requests.cpu"] == "248"
        assert quota_hard(k8s_cluster, p)["requests.memory"] == "1616Gi"
    jobs = launch(k8s_cluster, other_project, owner, [f"b{i}" for i in range(6)])  # 2 borrowed
    states = [(j.state, j.state_reason) for j in Job.objects.filter(pk__in=[j.pk for j in jobs])]
    assert [s for s, _ in states] == ["RUNNING"] * 6, states


def test_the_ceiling_is_the_cohorts_whole_and_builtin_keeps_the_projects_own(
    k8s_cluster: Any, k8s_jobs: Any, settings: Any, project: Project, other_project: Project
) -> None:
    Project.objects.filter(pk=project.pk).update(cpu_quota=10, memory_gib_quota=40)
    Project.objects.filter(pk=other_project.pk).update(cpu_quota=6, memory_gib_quota=0)
    project.refresh_from_db()
    assert namespace_cpu_memory_quotas(project) == (10, 40)  # builtin: its own
    ensure_project(project)
    assert quota_hard(k8s_cluster, project)["requests.cpu"] == "10"
    settings.QUEUE_ENGINE = "kueue"
    # beta has no memory quota, so Kueue lends memory without bound: no memory line.
    assert namespace_cpu_memory_quotas(project) == (16, 0)
    ensure_project(project)
    hard = quota_hard(k8s_cluster, project)
    assert hard["requests.cpu"] == "16" and "requests.memory" not in hard
