"""The capacity view's share of the cohort per project (QUEUE_ENGINE=kueue): nominal, in use,
borrowed and lent GPUs read from the ClusterQueues (spec and status, as the emulator's Kueue
writes them) by the periodic task, on the admins' page and in `/api/v1/capacity/`; and the
arithmetic of `lent` on literal ClusterQueues."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.cache import cache

from controlpanel.projects.models import Project
from controlpanel.queues.models import ProjectQueue
from controlpanel.queues.services import queues_observe, queues_reconcile
from controlpanel.queues.sharing import CACHE_KEY
from deploy.kubernetes.kueue_visibility import sharing
from tests.controlpanel.queues.test_kueue_positions import launch
from tests.fixtures.k8s import kueue_on
from tests.fixtures.panel import api_client_for, logged_in

GPU = "nvidia.com/gpu"


def queue(name: str, nominal: int, total: int = 0, borrowed: int = 0, **limits: int) -> Any:
    resource: dict[str, Any] = {"name": GPU, "nominalQuota": nominal, **limits}
    return {
        "metadata": {"name": f"ajuste-{name}", "labels": {"ajuste.io/project": name}},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "ajuste-default",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 64},
                                {"name": "memory", "nominalQuota": "256Gi"},
                            ],
                        }
                    ],
                },
                {"coveredResources": [GPU], "flavors": [{"name": "h100", "resources": [resource]}]},
            ]
        },
        "status": {
            "flavorsReservation": [
                {"name": "h100", "resources": [{"name": GPU, "total": total, "borrowed": borrowed}]}
            ]
        },
    }


def rows(queues: list[Any]) -> list[tuple[str, int, int, int, int]]:
    return [(s.project, s.nominal, s.used, s.borrowed, s.lent) for s in sharing(queues)]


def test_what_borrowers_take_is_lent_by_the_idle_quotas_in_proportion() -> None:
    assert rows([queue("a", 4), queue("b", 4, total=8, borrowed=4)]) == [
        ("a", 4, 0, 0, 4),
        ("b", 4, 8, 4, 0),
    ]
    # a lends at most 2, c all its 4 idle GPUs: 4 borrowed split 2:4 → 1.33 and 2.67 → 1 and 3.
    assert rows(
        [queue("a", 4, lendingLimit=2), queue("b", 4, total=8, borrowed=4), queue("c", 4)]
    ) == [("a", 4, 0, 0, 1), ("b", 4, 8, 4, 0), ("c", 4, 0, 0, 3)]
    # A busy lender lends only its idle part; nobody borrowing, nobody lends; the CPU and
    # memory of the default flavor are no rows.
    assert rows([queue("a", 4, total=3), queue("b", 4, total=5, borrowed=1)]) == [
        ("a", 4, 3, 0, 1),
        ("b", 4, 5, 1, 0),
    ]
    assert rows([queue("a", 4, total=2), queue("b", 4)]) == [
        ("a", 4, 2, 0, 0),
        ("b", 4, 0, 0, 0),
    ]
    limited = sharing([queue("a", 4, borrowingLimit=0, lendingLimit=1)])[0]
    assert (limited.borrowing_limit, limited.lending_limit, limited.flavor) == (0, 1, "h100")


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_the_capacity_view_shows_each_projects_nominal_used_borrowed_and_lent_gpus(
    k8s_cluster: Any,
    k8s_jobs: Any,
    settings: Any,
    project: Project,
    other_project: Project,
    owner: Any,
    admin_user: Any,
) -> None:
    cache.delete(CACHE_KEY)
    kueue_on(k8s_cluster, settings)
    Project.objects.filter(pk__in=[project.pk, other_project.pk]).update(gpu_quota=4)
    ProjectQueue.objects.create(project=project, lending_limit=3, borrowing_limit=2)
    queues_reconcile()
    page = logged_in(admin_user).get("/dashboard/capacity/").content.decode()
    assert "Not read yet: Celery beat reads the ClusterQueues" in page
    launch(k8s_cluster, other_project, owner, [f"b{i}" for i in range(6)])  # 2 borrowed
    queues_observe()

    body = api_client_for(admin_user).get("/api/v1/capacity/").json()
    used = [r for r in body["sharing"] if r["used"] or r["lent"]]
    assert [(r["project"], r["nominal"], r["used"], r["borrowed"], r["lent"]) for r in used] == [
        ("alpha", 4, 0, 0, 2),
        ("beta", 4, 6, 2, 0),
    ]
    flavor = used[0]["flavor"]
    alpha = next(r for r in body["sharing"] if r["project"] == "alpha" and r["flavor"] == flavor)
    assert (alpha["borrowing_limit"], alpha["lending_limit"]) == (2, 3)

    page = logged_in(admin_user).get("/dashboard/capacity/").content.decode()
    shown = [
        re.sub(r"<[^>]+>", "|", row)
        for row in re.findall(r'<tr data-testid="share">(.*?)</tr>', page)
        if f"<td>{flavor}</td>" in row
    ]
    assert [re.sub(r"\|+", "|", r).strip("|") for r in shown] == [
        f"alpha|{flavor}|4|0|0|2|2|3",
        f"beta|{flavor}|4|6|2|0|none|all",
    ]
    assert "Read from the ClusterQueues at" in page


@pytest.mark.django_db
def test_the_builtin_engine_shows_no_cohort(admin_user: Any) -> None:
    page = logged_in(admin_user).get("/dashboard/capacity/").content.decode()
    assert 'data-testid="sharing"' not in page
    assert api_client_for(admin_user).get("/api/v1/capacity/").json()["sharing"] == []
