"""Proof of issue 29 on the Kubernetes emulator (JobSet v0.9.1): a job of two nodes submitted
through the panel's API runs as its JobSet, reaches RUNNING once both nodes run, survives a
node's failure (the group restarts: not final), ends DONE, and is billed per node: every pod of
every attempt is a run of `gpu` units, so the ledger holds nodes x gpu x minutes."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import F, Sum

from controlpanel.billing.models import Line
from controlpanel.billing.rules import billed_minutes
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.models import JobRun
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.jobs.models import Job
from controlpanel.jobs.services import job_stop
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from controlpanel.queues.services import queues_reconcile
from deploy import names
from tests.controlpanel.jobs.test_k8s_journey import start
from tests.deploy.kueue_objects import need_schemas
from tests.fixtures.jobs import access_for, submit
from tests.fixtures.k8s_emulator import crds

pytestmark = pytest.mark.k8s
NS = "ajuste-alpha"
S = JobState
URL = "/api/v1/jobs/?project=alpha"
BODY = {
    "image": "registry.example.com/train:1",
    "command": ["torchrun", "train.py"],
    "flavor": "h100-1-gpu",
    "gpu": 1,
    "nodes": 2,
}


def live_pods(cluster: Any, job: Job) -> list[str]:
    child = f"{names.job_name(job_ref(job))}-node-0"
    found = [
        p
        for p in cluster.pods_of(NS, child)
        if not p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]
    return [p["metadata"]["name"] for p in found]


def test_two_nodes_through_the_api_run_restart_once_and_are_billed_per_node(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner_api: Any, panel_s3: Any
) -> None:
    need_schemas(crds.JOBSET)
    k8s_cluster.install_jobset()
    answer = owner_api.post(URL, BODY, "json")
    assert answer.status_code == 201, answer.json()
    job = start(Job.objects.get(pk=answer.json()["id"]))
    name = names.job_name(job_ref(job))
    assert k8s_cluster.get("jobsets", NS, name) is not None
    assert k8s_cluster.get("jobs", NS, name) is None  # no one-node Job beside it
    first = live_pods(k8s_cluster, job)
    assert len(first) == 2
    for pod in first:
        k8s_cluster.kubelet.run(NS, pod)
    sweep()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == (S.RUNNING, "running on 2 nodes")

    k8s_cluster.kubelet.finish(NS, first[1], exit_code=1, message="NCCL watchdog timeout")
    sweep()
    job.refresh_from_db()
    assert job.state == S.RUNNING  # the group restarts: not FAILED
    assert "the group restarts after a node failed (restart 1 of 2)" in job.state_reason
    second = live_pods(k8s_cluster, job)
    assert len(second) == 2 and not set(second) & set(first)
    for pod in second:
        k8s_cluster.kubelet.run(NS, pod)
    sweep()
    uids = [k8s_cluster.get("pods", NS, pod)["metadata"]["uid"] for pod in second]
    k8s_cluster.advance(600)  # ten minutes of training on both nodes
    for pod in second:
        k8s_cluster.kubelet.finish(NS, pod)
    sweep()
    job.refresh_from_db()
    assert (job.state, job.exit_code) == (S.DONE, 0)

    runs = JobRun.objects.filter(job=job)
    assert runs.count() == 4  # two nodes, two attempts
    assert set(runs.values_list("units", flat=True)) == {1}
    assert not runs.filter(finished_at=None).exists()
    # The attempt that ran ten minutes is billed per node: 2 runs of 1 GPU, each for every
    # started minute of its own pod (billing's rule), so nodes x gpu x minutes in all.
    last = runs.filter(uid__in=uids)
    assert last.count() == 2
    expected = 0
    for run in last:
        assert run.finished_at is not None and run.started_at is not None
        assert (run.finished_at - run.started_at).total_seconds() >= 600
        expected += billed_minutes(run.started_at, run.finished_at) * 1
    lines = Line.objects.filter(run__uid__in=uids)
    assert lines.aggregate(gm=Sum(F("minutes") * F("units")))["gm"] == expected >= 2 * 1 * 10
    # The first attempt's nodes are billed too (until their pods went), one run each.
    first_runs = runs.exclude(uid__in=uids)
    assert first_runs.count() == 2
    assert Line.objects.filter(run__in=first_runs).values("run").distinct().count() == 2


@pytest.mark.django_db(transaction=True)
def test_with_kueue_the_two_nodes_are_admitted_as_one_gang(
    k8s_cluster: Any, k8s_jobs: Any, settings: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    """Alpha's 4 GPUs, one held by a running job: the 2 x 2-GPU gang waits QUEUED with Kueue's
    reason and no pod at all (never half of it); once the GPU is free both nodes start."""
    need_schemas(crds.JOBSET)
    need_schemas(crds.KUEUE)
    settings.QUEUE_ENGINE = "kueue"
    k8s_cluster.install_kueue()
    k8s_cluster.install_jobset()
    Project.objects.filter(pk=project.pk).update(gpu_quota=4)
    assert "ajuste-alpha" in queues_reconcile()
    one = submit(project, owner, gpu=1, name="one")
    assert admit_jobs(project_id=project.pk) == [str(one.pk)]
    reconcile(str(one.pk))
    [pod] = k8s_cluster.pods_of(NS, names.job_name(job_ref(one)))
    k8s_cluster.kubelet.run(NS, pod["metadata"]["name"])
    gang = submit(project, owner, gpu=2, nodes=2, name="gang")
    assert admit_jobs(project_id=project.pk) == [str(gang.pk)]  # Kueue queues, not the panel
    reconcile(str(gang.pk))
    sweep()
    gang.refresh_from_db()
    assert gang.state == S.QUEUED and "Kueue queue ajuste" in gang.state_reason
    assert live_pods(k8s_cluster, gang) == []  # no node starts before the whole gang fits
    k8s_cluster.kubelet.finish(NS, pod["metadata"]["name"])
    sweep()
    assert len(live_pods(k8s_cluster, gang)) == 2
    for name in live_pods(k8s_cluster, gang):
        k8s_cluster.kubelet.run(NS, name)
    sweep()
    gang.refresh_from_db()
    assert (gang.state, gang.state_reason) == (S.RUNNING, "running on 2 nodes")
    job_stop(access=access_for(project), user=owner, job=gang)
    reconcile(str(gang.pk))  # what the enqueued task does: suspend the JobSet
    sweep()
    gang.refresh_from_db()
    assert gang.state == S.INTERRUPTED, gang.state_reason
    assert live_pods(k8s_cluster, gang) == []
