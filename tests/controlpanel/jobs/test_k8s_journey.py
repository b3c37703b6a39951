"""The panel's job lifecycle against the Kubernetes emulator, step by step (services, admission,
reconcile, sweep, logs), with the test kubelet moving pods through their phases."""

from __future__ import annotations

import os
from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.engine import logs
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.models import JobRun
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.jobs.models import Job
from controlpanel.jobs.services import job_stop
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy import names
from tests.fixtures.jobs import access_for, project_bucket, submit

pytestmark = pytest.mark.k8s
NS = "ajuste-alpha"
S = JobState


def start(job: Job) -> Job:
    assert admit_jobs(project_id=job.project_id) == [str(job.pk)]
    reconcile(str(job.pk))
    job.refresh_from_db()
    return job


def pod_of(cluster: Any, job: Job) -> str:
    return cluster.pod_of(NS, names.job_name(job_ref(job)))


def states(job: Job) -> list[str]:
    return list(job.events.order_by("at", "pk").values_list("state", flat=True))


@pytest.fixture
def volumes(project: Project, panel_s3: Any, data_bucket: Bucket) -> list[str]:
    out = project_bucket(project, panel_s3)
    return [
        f"{data_bucket.name}@LOCAL/dataset:/workspace/data:ro",
        f"{out.name}@LOCAL/output:/workspace/output:rw",
    ]


def test_pending_running_finalizing_done(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, volumes: list[str]
) -> None:
    job = start(submit(project, owner, gpu=2, volumes=volumes))
    k8s_job = k8s_cluster.get("jobs", NS, names.job_name(job_ref(job)))
    assert k8s_job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ajuste"
    assert k8s_cluster.get("namespaces", None, NS) is not None  # ensure_project ran
    kubelet, pod = k8s_cluster.kubelet, pod_of(k8s_cluster, job)

    kubelet.unschedulable(NS, pod, "0/12 nodes are available: 12 Insufficient nvidia.com/gpu.")
    sweep()
    job.refresh_from_db()
    assert job.state == S.PENDING and "Insufficient nvidia.com/gpu" in job.state_reason

    kubelet.start_init(NS, pod)
    sweep()
    assert Job.objects.get(pk=job.pk).state == S.INITIALIZING

    kubelet.run(NS, pod)
    kubelet.log(NS, pod, "epoch 1", "\x1b[32mok\x1b[0m")
    sweep()
    job.refresh_from_db()
    assert job.state == S.RUNNING and job.started_at is not None
    assert logs.collect_logs(job_id=job.pk) == (2, False)
    assert logs.collect_logs(job_id=job.pk) == (0, False)  # no duplicates
    kubelet.log(NS, pod, "epoch 2")
    assert logs.collect_logs(job_id=job.pk)[0] == 1

    kubelet.finish(NS, pod, exit_code=0)
    sweep()  # FINALIZING with the push to start: the sweep starts it
    job.refresh_from_db()
    assert job.state == S.FINALIZING
    kubelet.finish(NS, k8s_cluster.pod_of(NS, names.push_job_name(job_ref(job), 1)))
    sweep()
    job.refresh_from_db()
    assert job.state == S.DONE and job.exit_code == 0
    assert list(job.events.order_by("at", "pk").values_list("state", "reason")) == [
        (S.QUEUED, "submitted"),
        (S.QUEUED, "admitted: starting"),
        (S.PENDING, "creating the pod"),  # a new reason within a state is kept too
        (S.PENDING, "0/12 nodes are available: 12 Insufficient nvidia.com/gpu."),
        (S.INITIALIZING, "pulling volumes"),
        (S.RUNNING, "running"),
        (S.FINALIZING, "pushing rw volumes (attempt 1)"),
        (S.DONE, "exit code 0"),
    ]
    assert logs.archive_logs(job_id=job.pk)
    assert [line.text for line in logs.tail(job=job)] == ["epoch 1", "\x1b[32mok\x1b[0m", "epoch 2"]
    run = JobRun.objects.get(job=job)
    assert (run.started_at, run.finished_at, run.units) == (job.started_at, job.finished_at, 2)


def test_failure_records_the_exit_code(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = start(submit(project, owner))
    pod = pod_of(k8s_cluster, job)
    k8s_cluster.kubelet.run(NS, pod)
    k8s_cluster.kubelet.finish(NS, pod, exit_code=3, message="ValueError: bad row 17")
    sweep()
    job.refresh_from_db()
    assert (job.state, job.exit_code) == (S.FAILED, 3)
    assert job.state_reason == "exit code 3: ValueError: bad row 17"


def test_stop_interrupts(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = start(submit(project, owner))
    pod = pod_of(k8s_cluster, job)
    k8s_cluster.kubelet.run(NS, pod)
    job_stop(access=access_for(project), user=owner, job=job)
    assert Job.objects.get(pk=job.pk).state == S.INTERRUPTING
    reconcile(str(job.pk))  # what the enqueued task does: ask the cluster to stop
    k8s_cluster.advance(2)
    sweep()
    job.refresh_from_db()
    assert job.state == S.INTERRUPTED, job.state_reason
    assert states(job)[-2:] == [S.INTERRUPTING, S.INTERRUPTED]


def test_stop_before_launch_needs_no_cluster(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = submit(project, owner)
    job_stop(access=access_for(project), user=owner, job=job)
    job.refresh_from_db()
    assert job.state == S.INTERRUPTED and "before it started" in job.state_reason
    assert k8s_cluster.list("jobs") == []


def test_timeout(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = start(submit(project, owner, timeout=600))
    k8s_cluster.kubelet.run(NS, pod_of(k8s_cluster, job))
    k8s_cluster.advance(601)
    sweep()
    job.refresh_from_db()
    assert states(job)[-2:] == [S.TIMEOUT, S.INTERRUPTED]
    assert job.state == S.INTERRUPTED


def test_duplicate_reconcile_creates_one_job(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = start(submit(project, owner))
    for _ in range(3):
        reconcile(str(job.pk))
    assert len(k8s_cluster.list("jobs", NS)) == 1
    assert len(k8s_cluster.list("pods", NS)) == 1


def test_worker_killed_after_create_before_save(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    """The objects exist but the row never learnt it: the next reconcile adopts them."""
    job = start(submit(project, owner))
    Job.objects.filter(pk=job.pk).update(launched_run=0, state=S.QUEUED)
    reconcile(str(job.pk))
    assert len(k8s_cluster.list("pods", NS)) == 1
    assert Job.objects.get(pk=job.pk).launched_run == 1


def test_quota_queues_first_in_first_out(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    project.gpu_quota = 4
    project.save()
    first = submit(project, owner, gpu=3)
    second = submit(project, owner, gpu=2)
    third = submit(project, owner, gpu=1)
    assert admit_jobs(project_id=project.pk) == [str(first.pk)]
    second.refresh_from_db()
    third.refresh_from_db()
    assert second.state_reason == (
        "waiting: project GPU quota 4 GPUs, 3 in use, this job needs 2; position 1 in the queue"
    )
    # A small job does not overtake the queue.
    assert third.state_reason == (
        "waiting behind earlier jobs for the project's GPU quota; position 2 in the queue"
    )
    reconcile(str(first.pk))
    pod = pod_of(k8s_cluster, first)
    k8s_cluster.kubelet.run(NS, pod)
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    sweep()
    assert Job.objects.get(pk=first.pk).state == S.DONE
    assert set(admit_jobs(project_id=project.pk)) == {str(second.pk), str(third.pk)}


def test_lost_workload_is_an_error(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = start(submit(project, owner))
    k8s_jobs.delete_job(ref=job_ref(job))
    sweep()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == (S.ERROR, "the workload disappeared from the cluster")


def test_transient_api_error_is_retried(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    from deploy.types import TransientError

    job = submit(project, owner)
    admit_jobs(project_id=project.pk)
    k8s_cluster.fail_next("POST", "jobs", status=500, times=5)
    with pytest.raises(TransientError):
        reconcile(str(job.pk))
    reconcile(str(job.pk))  # the retried task
    assert len(k8s_cluster.list("jobs", NS)) == 1


def test_one_sweep_at_a_time(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, settings: Any
) -> None:
    from django.core.cache import cache

    from controlpanel.engine import tasks

    # Its own cache space, this process's only: Redis outlives the session, and a key left by an
    # earlier run (same project pk) would make ensure_project skip the namespace.
    prefix = f"t{os.getpid()}-{project.pk}"
    settings.CACHES = {"default": settings.CACHES["default"] | {"KEY_PREFIX": prefix}}
    job = start(submit(project, owner))
    k8s_cluster.kubelet.run(NS, pod_of(k8s_cluster, job))
    cache.add(tasks.SWEEP_LOCK, "another worker's sweep", timeout=60)
    assert tasks.jobs_sweep() == {"skipped": 1}
    assert Job.objects.get(pk=job.pk).state == S.PENDING  # nothing was observed
    cache.delete(tasks.SWEEP_LOCK)
    assert tasks.jobs_sweep()["changed"] == 1
    assert Job.objects.get(pk=job.pk).state == S.RUNNING
    assert cache.get(tasks.SWEEP_LOCK) is None  # released for the next beat


def test_a_forged_run_elsewhere_neither_ends_nor_bills_a_job(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    from dataclasses import replace

    from controlpanel.engine.sweep import record_observation
    from controlpanel.jobs.request import job_request
    from deploy.kubernetes.apply import with_hash
    from deploy.manifests import make_job
    from deploy.types import Phase

    job = start(submit(project, owner))
    k8s_cluster.kubelet.run(NS, pod_of(k8s_cluster, job))
    sweep()
    assert Job.objects.get(pk=job.pk).state == S.RUNNING
    # Someone who may create Jobs in a namespace of their own copies ours, labels and all.
    k8s_cluster.create_namespace("mallory")
    forged = make_job(job=replace(job_request(job), namespace="mallory"))
    k8s_cluster.create(with_hash(forged))
    pod = k8s_cluster.pod_of("mallory", forged["metadata"]["name"])
    k8s_cluster.kubelet.run("mallory", pod)
    k8s_cluster.kubelet.finish("mallory", pod, exit_code=1)
    sweep()
    # And an observation that names the job from there, as a watch would hand it over.
    seen = k8s_jobs.observe_job(ref=job_ref(job))
    assert not record_observation(replace(seen, namespace="mallory", phase=Phase.FAILED))
    job.refresh_from_db()
    assert job.state == S.RUNNING
    assert JobRun.objects.filter(job=job).count() == 1


def _finish(cluster: Any, job: Job, *, pushed: bool = False) -> Job:
    pod = pod_of(cluster, job)
    cluster.kubelet.run(NS, pod)
    cluster.kubelet.finish(NS, pod, exit_code=0)
    sweep()
    if pushed:
        cluster.kubelet.finish(NS, cluster.pod_of(NS, names.push_job_name(job_ref(job), 1)))
        sweep()
    job.refresh_from_db()
    assert job.state == S.DONE, job.state_reason
    return job


def test_cpu_memory_and_pod_quotas_queue_cpu_jobs_too(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    project.cpu_quota, project.memory_gib_quota, project.pod_quota = 2, 16, 2
    project.save()
    first = submit(project, owner, flavor="ai1-1-cpu", gpu=1)  # 1 vCPU, 4 GiB
    second = submit(project, owner, flavor="ai1-1-cpu", gpu=2)  # 2 vCPU, 8 GiB
    assert admit_jobs(project_id=project.pk) == [str(first.pk)]
    second.refresh_from_db()
    assert second.state_reason == (
        "waiting: project CPU quota 2 vCPU, 1 in use, this job needs 2; position 1 in the queue"
    )
    reconcile(str(first.pk))
    hard = k8s_cluster.get("resourcequotas", NS, "ajuste-quota")["spec"]["hard"]
    assert hard == {
        "requests.nvidia.com/gpu": "8",
        "requests.cpu": "2",
        "requests.memory": "16Gi",
        "pods": "2",
        "requests.storage": "2048Gi",
    }
    _finish(k8s_cluster, first)
    assert admit_jobs(project_id=project.pk) == [str(second.pk)]

    project.memory_gib_quota, project.pod_quota, project.cpu_quota = 12, 1, 0
    project.save()
    third = submit(project, owner, flavor="ai1-1-cpu", gpu=4)
    fourth = submit(project, owner, flavor="ai1-1-cpu", gpu=1)
    assert admit_jobs(project_id=project.pk) == []
    third.refresh_from_db()
    fourth.refresh_from_db()
    assert third.state_reason == (
        "this job needs 16 GiB, more than the project's memory quota of 12: it cannot start "
        "until an admin raises the quota; position 1 in the queue"
    )
    assert fourth.state_reason == (  # the job that can never start blocks nobody
        "waiting: project pod quota 1 pods, 1 in use, this job needs 1; position 2 in the queue"
    )


def test_a_clean_end_releases_the_workspace_a_failed_push_keeps_it(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    volumes: list[str],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from controlpanel.engine import tasks
    from controlpanel.jobs import tasks as job_tasks

    for task in (job_tasks.job_notify, tasks.project_admit):
        monkeypatch.setattr(task, "delay", lambda *args: None)
    settings.JOB_WORKSPACE_GIB = 50
    project.storage_gib_quota = 60
    project.save()
    first = submit(project, owner, volumes=volumes)
    second = submit(project, owner, volumes=volumes)
    assert admit_jobs(project_id=project.pk) == [str(first.pk)]
    second.refresh_from_db()
    assert second.state_reason == (
        "waiting: project storage quota 60 GiB, 50 in use, this job needs 50; "
        "position 1 in the queue"
    )
    reconcile(str(first.pk))
    claim = names.workspace_claim_name(job_ref(first))
    assert k8s_cluster.get("persistentvolumeclaims", NS, claim) is not None
    _finish(k8s_cluster, first, pushed=True)
    tasks.job_finalize(str(first.pk), 1)
    assert k8s_cluster.get("persistentvolumeclaims", NS, claim) is None
    assert admit_jobs(project_id=project.pk) == [str(second.pk)]

    # A push that must be retried keeps its claim, and the storage it counts.
    reconcile(str(second.pk))
    kept = names.workspace_claim_name(job_ref(second))
    Job.objects.filter(pk=second.pk).update(state=S.SYNC_FAILED)
    tasks.job_finalize(str(second.pk), 1)
    assert k8s_cluster.get("persistentvolumeclaims", NS, kept) is not None
    third = submit(project, owner, volumes=volumes)
    assert admit_jobs(project_id=project.pk) == []
    assert "storage quota 60 GiB, 50 in use" in Job.objects.get(pk=third.pk).state_reason


@pytest.mark.parametrize("status", [413, 422, 403])
def test_a_request_the_cluster_always_refuses_ends_in_error_with_its_reason(
    status: int, k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    """Re-sending what the server refuses (too large, invalid, forbidden) changes nothing: the
    job ends in ERROR with the server's answer instead of staying QUEUED, re-sent every sweep."""
    job = submit(project, owner)
    admit_jobs(project_id=project.pk)
    k8s_cluster.fail_next("POST", "jobs", status=status)
    reconcile(str(job.pk))
    job.refresh_from_db()
    assert job.state == S.ERROR
    assert job.state_reason.startswith(f"the cluster refused Job {names.job_name(job_ref(job))}")
    assert f"(HTTP {status})" in job.state_reason
    sweep()  # the sweep leaves a final job alone: nothing is sent again
    assert k8s_cluster.list("jobs", NS) == []
