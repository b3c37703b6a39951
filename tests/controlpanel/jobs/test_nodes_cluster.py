"""A job of several nodes that the backend's machines could never hold at once is refused at
submit (issue 29): N × per-node GPUs against every GPU of the flavor's model the panel's last
capacity reading found (`dashboards.capacity`), with a precise sentence, before anything is
saved. The project's quota is a separate check (test_nodes.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from django.core.exceptions import ValidationError

from controlpanel.dashboards.capacity import CACHE_KEY, capacity_refresh
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.nodes import check_nodes, cluster_problem
from controlpanel.projects.models import Project
from tests.deploy.test_k8s_capacity import H100, L4, node
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = pytest.mark.k8s

URL = "/api/v1/jobs/?project=alpha"
BODY = {
    "image": "registry.example.com/train:1",
    "command": ["python", "train.py"],
    "flavor": "h100-1-gpu",
    "gpu": 2,
}


@pytest.fixture(autouse=True)
def no_reading() -> Any:
    cache.delete(CACHE_KEY)
    yield
    cache.delete(CACHE_KEY)


@pytest.fixture
def cluster(k8s_jobs: Any, k8s_cluster: EmulatedCluster, project: Project) -> EmulatedCluster:
    """Two H100 nodes of 4 GPUs (one cordoned: it still counts, it may come back) and an L4
    node of 8, read by the capacity task as the panel reads it."""
    project.gpu_quota = 64
    project.save()
    k8s_cluster.create(node("h100-a", gpus=4, product=H100))
    k8s_cluster.create(node("h100-b", gpus=4, product=H100, cordoned=True))
    k8s_cluster.create(node("l4-a", gpus=8, product=L4))
    assert capacity_refresh() is not None
    return k8s_cluster


def test_more_gpus_than_the_clusters_nodes_have_is_refused_and_saves_nothing(
    owner_api: Any, cluster: EmulatedCluster
) -> None:
    answer = owner_api.post(URL, BODY | {"nodes": 5}, "json")
    assert answer.status_code == 400
    [sentence] = answer.json()["nodes"]
    assert sentence.startswith(
        "5 nodes of 2 GPUs need 10 H100 GPUs at once but the cluster's nodes have 8 in all "
        "(read at "
    )
    assert sentence.endswith("): the job could never start.")
    assert not Job.objects.exists()
    # Every H100 of the cluster, the cordoned node's included (the L4s are not the model).
    assert owner_api.post(URL, BODY | {"nodes": 4}, "json").status_code == 201
    assert list(Job.objects.values_list("nodes", flat=True)) == [4]


def test_the_form_says_the_same(owner_client: Any, cluster: EmulatedCluster) -> None:
    form = {"tab": "custom", "c-image": "x/y:1", "c-flavor": "h100-1-gpu", "c-gpu": "4"}
    refused = owner_client.post("/p/alpha/jobs/new/?tab=custom", form | {"c-nodes": "3"})
    assert refused.status_code == 400
    assert "3 nodes of 4 GPUs need 12 H100 GPUs at once" in refused.content.decode()
    assert not Job.objects.exists()
    made = owner_client.post("/p/alpha/jobs/new/?tab=custom", form | {"c-nodes": "2"})
    assert made.status_code == 302
    assert Job.objects.get().nodes == 2


def test_the_check_reads_the_kept_reading_only(
    project: Project, cluster: EmulatedCluster, settings: Any
) -> None:
    """The service layer: a reading of another backend, or none, decides nothing (the
    scheduler does); one node is never refused here; a CPU flavor has no GPU figure."""
    flavor = Flavor.objects.get(name="h100-1-gpu")
    with pytest.raises(ValidationError) as refused:
        check_nodes(3, 3, flavor, project)
    assert "3 nodes of 3 GPUs need 9 H100 GPUs" in refused.value.messages[0]
    assert check_nodes(2, 4, flavor, project) == 2
    assert check_nodes(1, 8, flavor, project) == 1  # one node: the quota and scheduler decide
    settings.COMPUTE_BACKEND = "local"
    assert cluster_problem(3, 3, flavor) is None  # a reading of the cluster, not of this machine
    settings.COMPUTE_BACKEND = "kubernetes"
    cache.delete(CACHE_KEY)
    assert cluster_problem(3, 3, flavor) is None  # no reading: nothing is known
    cpu = Flavor.objects.filter(gpus_per_unit=0).first() or Flavor.objects.get(name="ai1-1-cpu")
    assert cluster_problem(8, 8, cpu) is None
