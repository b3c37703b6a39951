"""A job of several nodes (its JobSet) evicted by Kueue (issues 28/29): its queued observation
carries Kueue's Evicted time like a one-node Job's, each node's pod is metered to its own end
(seen terminating: its deletion's deadline), never to when the panel noticed the requeue, and
re-admitted the group's new pods bill from their own start: no minute after a pod ended, none
twice. On the emulator's Kueue and JobSet, the cluster's clock 30 minutes behind the panel's."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db.models import F
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
from deploy.kubernetes.jobsets import observe_jobset
from deploy.kubernetes.observe import JobObjects
from deploy.kubernetes.pods import parse_time
from deploy.types import Phase, ReplicaRun, WorkloadKind, WorkloadRef
from tests.controlpanel.queues.test_eviction_metering import _workload, billed_minutes, requeued
from tests.deploy.kueue_objects import need_schemas
from tests.fixtures.jobs import submit
from tests.fixtures.k8s_emulator import crds

BEHIND = timedelta(minutes=30)
MINUTE = timedelta(minutes=1)


def _suspended_jobset() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "job-x",
            "namespace": "ajuste-alpha",
            "uid": "u1",
            "labels": {"kueue.x-k8s.io/queue-name": "ajuste"},
        },
        "spec": {"suspend": True},
        "status": {"restarts": 0},
    }


def test_the_observation_of_an_evicted_jobset_carries_kueues_eviction_time() -> None:
    ref = WorkloadRef(WorkloadKind.JOB, "alpha", "ajuste-alpha", "x", 1)
    jobset = _suspended_jobset()
    evicted = JobObjects(job=None, jobset=jobset, workload=_workload("2026-12-05T10:07:31Z"))
    seen = observe_jobset(ref, evicted)
    assert seen.phase is Phase.QUEUED and seen.reason.startswith("preempted: ")
    assert seen.evicted_at == datetime(2026, 12, 5, 10, 7, 31, tzinfo=UTC)
    waiting = observe_jobset(ref, JobObjects(job=None, jobset=jobset, workload=_workload(None)))
    assert waiting.phase is Phase.QUEUED and waiting.evicted_at is None  # never admitted


@pytest.mark.django_db
def test_the_nodes_an_evicted_groups_observation_lists_are_left_to_it(
    settings: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    """Billing layer: the requeue's observation lists node 0 terminating and node 1 ended;
    node 2 is gone, never seen terminating. Node 0 stays metered until its deadline, node 1
    ends at its own finish, node 2 at Kueue's eviction; none at the panel's now."""
    settings.QUEUE_ENGINE = "kueue"
    job = submit(project, owner, gpu=1, nodes=3)
    admit_jobs(project_id=project.pk)
    job.refresh_from_db()
    record_state(job, "RUNNING", "running on 3 nodes")
    started = timezone.now().replace(microsecond=0) - timedelta(minutes=10)
    nodes = tuple(ReplicaRun(f"node-{i}", started) for i in range(3))
    running = replace(requeued(job, replica_runs=nodes), phase=Phase.RUNNING, reason="running")
    apply_observation(job, running)
    evicted = started + timedelta(minutes=4)
    deadline = evicted + timedelta(minutes=2)
    ended = evicted + timedelta(seconds=20)
    seen = (
        ReplicaRun("node-0", started, ends_by=deadline),
        ReplicaRun("node-1", started, finished_at=ended, exit_code=143),
    )
    assert apply_observation(job, requeued(job, evicted_at=evicted, replica_runs=seen), fresh=True)
    runs = {run.uid: run for run in JobRun.objects.filter(job=job)}
    assert runs["node-0"].finished_at is None and runs["node-0"].ends_by == deadline
    assert runs["node-1"].finished_at == ended
    assert runs["node-2"].finished_at == evicted
    apply_observation(job, requeued(job, evicted_at=evicted, replica_runs=()), fresh=True)
    runs["node-0"].refresh_from_db()
    assert runs["node-0"].finished_at == deadline  # gone unseen: its deadline, not now
    assert [billed_minutes(runs[f"node-{i}"]) for i in range(3)] == [6, 5, 4]


def _group_pods(cluster: Any, job: Job) -> list[dict[str, Any]]:
    return cluster.pods_of(job.project.namespace, f"{names.job_name(job_ref(job))}-node-0")


def _run_new_pods(cluster: Any, job: Job) -> list[str]:
    started = []
    for pod in _group_pods(cluster, job):
        if not pod["metadata"].get("deletionTimestamp") and not pod["status"].get(
            "containerStatuses"
        ):
            cluster.kubelet.run(job.project.namespace, pod["metadata"]["name"])
            started.append(pod["metadata"]["name"])
    return started


def _spans(run: JobRun) -> list[tuple[datetime, datetime]]:
    """The run's usage lines as the spans they bill ([first minute's start, last's end))."""
    spans = []
    for line in Line.objects.filter(run=run, period=F("of_period")).order_by("first_minute"):
        first = line.run_start + line.first_minute * MINUTE
        spans.append((first, first + line.minutes * MINUTE))
    return spans


def _gang_borrowing(
    cluster: Any, settings: Any, project: Project, other_project: Project, owner: Any
) -> Job:
    """Beta's 2 x 1-GPU gang RUNNING on its GPU and alpha's idle one (borrowed), 5 min 20 s
    in, the cluster 30 minutes behind the panel."""
    need_schemas(crds.JOBSET)
    need_schemas(crds.KUEUE)
    settings.QUEUE_ENGINE = "kueue"
    cluster.install_kueue()
    cluster.install_jobset()
    cluster.advance(-BEHIND.total_seconds())
    Project.objects.filter(pk__in=[project.pk, other_project.pk]).update(gpu_quota=1)
    queues_reconcile()
    # Beta's 2 x 1-GPU gang borrows alpha's idle GPU.
    gang = submit(other_project, owner, gpu=1, nodes=2, preemptible=True, name="gang")
    assert admit_jobs(project_id=other_project.pk) == [str(gang.pk)]
    reconcile(str(gang.pk))
    assert len(_run_new_pods(cluster, gang)) == 2
    sweep_now()
    gang.refresh_from_db()
    assert (gang.state, gang.state_reason) == ("RUNNING", "running on 2 nodes")
    cluster.advance(5 * 60 + 20)  # 5 min 20 s of training
    return gang


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_an_evicted_jobset_bills_each_node_to_its_end_and_no_minute_twice(
    k8s_cluster: Any,
    k8s_jobs: Any,
    settings: Any,
    project: Project,
    other_project: Project,
    owner: Any,
    panel_s3: Any,
) -> None:
    gang = _gang_borrowing(k8s_cluster, settings, project, other_project, owner)
    # Alpha reclaims its GPU: Kueue evicts the whole gang; both nodes save (ignore SIGTERM).
    k8s_cluster.kubelet.ignore_sigterm = True
    ours = submit(project, owner, name="alpha-0")
    admit_jobs(project_id=project.pk)
    reconcile(str(ours.pk))
    sweep_now()
    gang.refresh_from_db()
    assert gang.state == "QUEUED" and gang.state_reason.startswith("preempted: "), (
        gang.state,
        gang.state_reason,
    )
    dying = _group_pods(k8s_cluster, gang)
    assert len(dying) == 2 and all(p["metadata"].get("deletionTimestamp") for p in dying)
    deadlines = {
        p["metadata"]["uid"]: parse_time(p["metadata"]["deletionTimestamp"]) for p in dying
    }
    first = {run.uid: run for run in JobRun.objects.filter(job=gang)}
    assert set(first) == set(deadlines)
    for run in first.values():  # both still save their checkpoint: metered, deadline kept
        assert run.finished_at is None and run.ends_by == deadlines[run.uid], run.uid
    grace = int(dying[0]["metadata"]["deletionGracePeriodSeconds"])
    k8s_cluster.advance(grace)  # killed at their grace's end and gone, unseen
    assert _group_pods(k8s_cluster, gang) == []
    sweep_now()
    for run in first.values():
        run.refresh_from_db()
        assert run.finished_at == deadlines[run.uid], run.uid  # its own end, not now
        assert timezone.now() - run.finished_at > timedelta(minutes=15)  # the panel: later
        minutes = math.ceil((run.finished_at - run.started_at) / MINUTE)
        assert billed_minutes(run) == minutes < 30, run.uid
        assert _spans(run)[-1][1] - MINUTE < run.finished_at  # no minute after it ended
    # Alpha's job ends; Kueue re-admits the gang: two new pods, billed from their own start.
    k8s_cluster.kubelet.ignore_sigterm = False
    [pod] = k8s_cluster.pods_of(project.namespace, names.job_name(job_ref(ours)))
    k8s_cluster.kubelet.finish(project.namespace, pod["metadata"]["name"])
    sweep_now()
    reconcile(str(gang.pk))
    assert len(_run_new_pods(k8s_cluster, gang)) == 2
    sweep_now()
    gang.refresh_from_db()
    assert gang.state == "RUNNING", gang.state_reason
    k8s_cluster.advance(3 * 60)
    for pod in _group_pods(k8s_cluster, gang):
        k8s_cluster.kubelet.finish(gang.project.namespace, pod["metadata"]["name"])
    sweep_now()
    gang.refresh_from_db()
    assert gang.state == "DONE", gang.state_reason
    runs = list(JobRun.objects.filter(job=gang).order_by("started_at"))
    assert len(runs) == 4 and all(r.finished_at is not None for r in runs)
    again = [r for r in runs if r.uid not in first]
    evicted_end = max(r.finished_at for r in first.values() if r.finished_at)
    assert all(r.started_at >= evicted_end for r in again)  # no GPU billed while it waited
    for run in runs:  # each pod's own started minutes, no line twice, no adjustment
        spans = _spans(run)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
        assert billed_minutes(run) == math.ceil((run.finished_at - run.started_at) / MINUTE)
    assert Line.objects.filter(run__job=gang).exclude(period=F("of_period")).count() == 0


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_nodes_gone_before_any_sweep_are_billed_to_kueues_eviction(
    k8s_cluster: Any,
    k8s_jobs: Any,
    settings: Any,
    project: Project,
    other_project: Project,
    owner: Any,
    panel_s3: Any,
) -> None:
    """The nodes stop on SIGTERM at once and are gone before the panel looks: never seen
    terminating, each node's run ends at the JobSet's Workload's Evicted time."""
    gang = _gang_borrowing(k8s_cluster, settings, project, other_project, owner)
    evicted = k8s_cluster.store.now().replace(microsecond=0)
    ours = submit(project, owner, name="alpha-0")
    admit_jobs(project_id=project.pk)
    reconcile(str(ours.pk))
    k8s_cluster.reconcile()  # the kubelet's next pass: they stop on SIGTERM (143) and go
    assert _group_pods(k8s_cluster, gang) == []  # gone, never seen terminating
    sweep_now()
    gang.refresh_from_db()
    assert gang.state == "QUEUED" and gang.state_reason.startswith("preempted: ")
    runs = list(JobRun.objects.filter(job=gang))
    assert len(runs) == 2
    for run in runs:
        assert run.finished_at is not None
        assert evicted <= run.finished_at <= k8s_cluster.store.now()  # the cluster's clock
        assert timezone.now() - run.finished_at > timedelta(minutes=15)  # not the panel's
        assert billed_minutes(run) == 6  # 5 min 20 s
