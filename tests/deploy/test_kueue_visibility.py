"""Where waiting work stands, read from Kueue's visibility API on the emulator (QUEUE_ENGINE=kueue):
a Job, a notebook's StatefulSet and an app's Deployment waiting in one project's LocalQueue are
each named by their workload id, in Kueue's order (the interactive notebook and app before the
batch job, then by creation), counted from 1; a queue with nothing waiting has no place; what
names no workload is left out, and the places stay Kueue's."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.kueue_visibility import Pending, pending_positions
from deploy.manifests import kueue as mk
from deploy.manifests.jobs import make_job
from deploy.types import NotebookRequest
from tests.deploy.conftest import make_job_request
from tests.deploy.test_kueue_config import H100, app_in, configured, gpu_job, notebook_in
from tests.fixtures.k8s_emulator import EmulatedCluster, crds

pytestmark = pytest.mark.k8s


@pytest.fixture
def kueue(k8s_cluster: EmulatedCluster) -> Any:
    missing = crds.missing(crds.KUEUE)
    if missing:
        pytest.skip(missing)
    return k8s_cluster.install_kueue()


def test_each_kind_waiting_is_named_by_its_id_in_kueues_order(
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    kueue: Any,
    notebook_request: NotebookRequest,
) -> None:
    configured(k8s_cluster, k8s_backend, borrowing_limit=0)  # b never borrows: it waits
    api = k8s_backend.api
    for i in range(4):  # b's four GPUs are taken, by work nothing here may preempt
        k8s_cluster.create(gpu_job("b", i, tier="interactive"))
    kueue.settle()
    assert pending_positions(api, namespace="ajuste-b", local_queue="ajuste") == []
    job_id, notebook_id, app_id = (str(uuid.uuid4()) for _ in range(3))
    k8s_cluster.create(waiting_job(job_id))
    k8s_backend.apply_notebook(notebook=replace(notebook_in("b", notebook_request), id=notebook_id))
    k8s_backend.apply_app(app=app_in("b", id=app_id))
    k8s_cluster.reconcile()
    kueue.settle()
    assert pending_positions(api, namespace="ajuste-b", local_queue="ajuste") == [
        Pending(workload_id=notebook_id, local=1, cluster=1),
        Pending(workload_id=app_id, local=2, cluster=2),
        Pending(workload_id=job_id, local=3, cluster=3),
    ]


def test_items_naming_no_workload_are_skipped_and_places_stay_kueues(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, kueue: Any
) -> None:
    configured(k8s_cluster, k8s_backend, borrowing_limit=0)
    for i in range(6):  # four run, two wait: their names carry no workload id
        k8s_cluster.create(gpu_job("b", i, tier="batch"))
    job_id = str(uuid.uuid4())
    k8s_cluster.create(waiting_job(job_id))
    kueue.settle()
    found = pending_positions(k8s_backend.api, namespace="ajuste-b", local_queue="ajuste")
    assert found == [Pending(workload_id=job_id, local=3, cluster=3)]


def waiting_job(workload_id: str) -> dict[str, Any]:
    """A batch Job of one GPU in b's queue, of a run whose workload id is `workload_id` (the
    Job's name carries it, as every object of a workload does)."""
    request = make_job_request(
        id=workload_id,
        project="b",
        namespace="ajuste-b",
        flavor=H100,
        units=1,
        volumes=(),
        queue_name=mk.LOCAL_QUEUE,
        priority_class=mk.priority_class_name("batch"),
    )
    return make_job(job=request)
