"""Faults of the job lifecycle against the Kubernetes emulator (issue #12): orphaned objects,
a node that stops reporting, stale observations applied late, and reasons that change within a
state. Through the real path: services, admission, reconcile and the sweep, on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from controlpanel.engine import tasks
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.models import Orphan
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.jobs import tasks as job_tasks
from controlpanel.jobs.models import Job
from controlpanel.jobs.services import job_delete, job_rerun, job_stop
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy import names
from tests.fixtures.jobs import access_for, submit

pytestmark = pytest.mark.k8s
NS = "ajuste-alpha"
S = JobState
LONG_AGO = timedelta(minutes=10)  # beyond the default grace of 5 minutes


class RolledBack(Exception):
    pass


@pytest.fixture(autouse=True)
def _quiet_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the finalize task enqueues is not under test here."""
    for task in (job_tasks.job_notify, tasks.project_admit, tasks.job_reconcile):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def start(job: Job) -> Job:
    assert admit_jobs(project_id=job.project_id) == [str(job.pk)]
    reconcile(str(job.pk))
    job.refresh_from_db()
    return job


def pod_of(cluster: Any, job: Job) -> str:
    return cluster.pod_of(NS, names.job_name(job_ref(job)))


def run_objects(cluster: Any, job: Job, run: int = 1) -> list[str]:
    """The Jobs and pods of one run of `job` still in the cluster."""
    found = []
    for plural in ("jobs", "pods"):
        for obj in cluster.list(plural, NS):
            labels = obj["metadata"].get("labels") or {}
            if labels.get(names.ID) == str(job.pk) and labels.get(names.RUN) == str(run):
                found.append(f"{plural}/{obj['metadata']['name']}")
    return found


def made_long_ago(cluster: Any) -> None:
    """Objects created from now on carry a creation time ten minutes back."""
    cluster.store.clock_offset = -LONG_AGO


def ended_long_ago(job: Job) -> None:
    Job.objects.filter(pk=job.pk).update(state_changed_at=timezone.now() - LONG_AGO)


def history(job: Job) -> list[tuple[str, str]]:
    return list(job.events.order_by("pk").values_list("state", "reason"))


# 1. Orphans


def test_a_launch_rolled_back_then_stopped_leaves_no_pod_behind(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    """The Job is created, the reconcile's transaction rolls back, 'stop' then ends the row
    without the cluster: after the grace period the sweep deletes the pod holding the GPUs."""
    job = submit(project, owner, gpu=2)
    assert admit_jobs(project_id=project.pk) == [str(job.pk)]
    made_long_ago(k8s_cluster)
    with pytest.raises(RolledBack), transaction.atomic():
        reconcile(str(job.pk))
        raise RolledBack  # the worker died before commit: the row never learnt of the Job
    k8s_cluster.kubelet.run(NS, pod_of(k8s_cluster, job))
    job.refresh_from_db()
    assert job.launched_run == 0

    job_stop(access=access_for(project), user=owner, job=job)
    tasks.job_finalize(str(job.pk), job.run)
    job.refresh_from_db()
    assert (job.state, job.logs_archived) == (S.INTERRUPTED, True)
    assert sweep()["orphans"] == 0  # within the grace period: the row ended a moment ago
    assert len(run_objects(k8s_cluster, job)) == 2

    ended_long_ago(job)
    assert sweep()["orphans"] == 1
    k8s_cluster.reconcile()  # the deleted pod's kubelet stops it
    assert run_objects(k8s_cluster, job) == []
    assert sweep()["orphans"] == 0  # nothing left to collect


def test_objects_younger_than_the_grace_period_are_left_alone(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = submit(project, owner)
    admit_jobs(project_id=project.pk)
    with pytest.raises(RolledBack), transaction.atomic():
        reconcile(str(job.pk))
        raise RolledBack
    job_stop(access=access_for(project), user=owner, job=job)
    tasks.job_finalize(str(job.pk), job.run)
    ended_long_ago(job)  # the row ended long ago, but the Job is new
    assert sweep()["orphans"] == 0
    assert len(run_objects(k8s_cluster, job)) == 2


def test_a_deleted_row_and_an_earlier_run_lose_their_objects(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    panel_s3: Any,
    settings: Any,
) -> None:
    settings.JOB_ORPHAN_GRACE_SECONDS = 60
    made_long_ago(k8s_cluster)
    gone = start(submit(project, owner))
    again = start(submit(project, owner))
    k8s_cluster.store.clock_offset = timedelta()
    for job in (gone, again):
        pod = pod_of(k8s_cluster, job)
        k8s_cluster.kubelet.run(NS, pod)
        k8s_cluster.kubelet.finish(NS, pod, exit_code=1)
    sweep()
    for job in (gone, again):
        tasks.job_finalize(str(job.pk), 1)
    gone.refresh_from_db()
    assert gone.state == S.FAILED
    # The row is deleted while its cleanup task is lost; the other job runs again.
    Job.objects.filter(pk=gone.pk).delete()
    again = job_rerun(access=access_for(project), user=owner, job=Job.objects.get(pk=again.pk))
    again = start(again)
    assert len(run_objects(k8s_cluster, again, run=2)) == 2

    # The earlier run goes; the run no row names is noted, its grace counting from now.
    assert sweep()["orphans"] == 1
    assert run_objects(k8s_cluster, again, run=1) == []
    assert len(run_objects(k8s_cluster, gone)) == 2
    assert [(o.workload_id, o.run) for o in Orphan.objects.all()] == [(str(gone.pk), 1)]
    Orphan.objects.update(noticed_at=timezone.now() - LONG_AGO)
    assert sweep()["orphans"] == 1
    assert run_objects(k8s_cluster, gone) == []
    assert len(run_objects(k8s_cluster, again, run=2)) == 2  # the live run is untouched
    assert not Orphan.objects.exists()  # no workspace to keep: forgotten once stopped


def test_a_failed_push_keeps_its_objects_a_live_job_too(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    panel_s3: Any,
    volumes: list[str],
) -> None:
    made_long_ago(k8s_cluster)
    kept = start(submit(project, owner, volumes=volumes))
    live = start(submit(project, owner))
    k8s_cluster.store.clock_offset = timedelta()
    pod = pod_of(k8s_cluster, kept)
    k8s_cluster.kubelet.run(NS, pod)
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    k8s_cluster.kubelet.run(NS, pod_of(k8s_cluster, live))
    sweep()  # starts the final push
    push = k8s_cluster.pod_of(NS, names.push_job_name(job_ref(kept), 1))
    k8s_cluster.kubelet.finish(NS, push, exit_code=1, message="1 file(s) failed")
    for _ in range(3):  # the push Job retries its pod, then fails
        k8s_cluster.back_off()
        retried = k8s_cluster.pod_of(NS, names.push_job_name(job_ref(kept), 1))
        if retried != push:
            k8s_cluster.kubelet.finish(NS, retried, exit_code=1, message="1 file(s) failed")
            push = retried
    sweep()
    kept.refresh_from_db()
    assert kept.state == S.SYNC_FAILED, kept.state_reason
    tasks.job_finalize(str(kept.pk), 1)
    ended_long_ago(kept)
    Job.objects.filter(pk=live.pk).update(state_changed_at=timezone.now() - LONG_AGO)
    objects = run_objects(k8s_cluster, kept)
    claim = names.workspace_claim_name(job_ref(kept))

    assert sweep()["orphans"] == 0
    assert run_objects(k8s_cluster, kept) == objects  # the retry needs them
    assert k8s_cluster.get("persistentvolumeclaims", NS, claim) is not None
    assert len(run_objects(k8s_cluster, live)) == 2


def test_an_error_run_still_running_is_stopped_its_data_kept(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    panel_s3: Any,
    volumes: list[str],
) -> None:
    made_long_ago(k8s_cluster)
    job = start(submit(project, owner, volumes=volumes))
    k8s_cluster.store.clock_offset = timedelta()
    k8s_cluster.kubelet.run(NS, pod_of(k8s_cluster, job))
    # An ERROR the pod outlived (a panel of an earlier version took a lost node for one).
    Job.objects.filter(pk=job.pk).update(state=S.ERROR, logs_archived=True)
    ended_long_ago(job)
    assert sweep()["orphans"] == 1
    k8s_cluster.advance(2)  # the stop's one-second deadline passes
    k8s_job = k8s_cluster.get("jobs", NS, names.job_name(job_ref(job)))
    assert k8s_job is not None and k8s_job["metadata"]["annotations"][names.STOP_REQUESTED]
    assert k8s_cluster.get("persistentvolumeclaims", NS, names.workspace_claim_name(job_ref(job)))
    assert sweep()["orphans"] == 0  # ended: nothing runs any more


def test_deleting_a_job_still_cleans_up_at_once(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = start(submit(project, owner))
    pod = pod_of(k8s_cluster, job)
    k8s_cluster.kubelet.run(NS, pod)
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    sweep()
    job.refresh_from_db()
    job_delete(access=access_for(project), user=owner, job=job)
    assert sweep()["orphans"] == 0  # young objects: job_cleanup (enqueued) deletes them


@pytest.fixture
def volumes(project: Project, panel_s3: Any, data_bucket: Any) -> list[str]:
    from tests.fixtures.jobs import project_bucket

    out = project_bucket(project, panel_s3)
    return [
        f"{data_bucket.name}@LOCAL/dataset:/workspace/data:ro",
        f"{out.name}@LOCAL/output:/workspace/output:rw",
    ]


# 2. A node that stops reporting


def test_a_lost_node_keeps_the_job_live_until_its_pod_is_gone(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = start(submit(project, owner))
    pod = pod_of(k8s_cluster, job)
    k8s_cluster.kubelet.run(NS, pod)
    sweep()
    k8s_cluster.store.patch("pods", NS, pod, {"status": {"phase": "Unknown"}})
    sweep()
    job.refresh_from_db()
    assert job.state == S.RUNNING
    assert job.state_reason == "the node gpu-node-1 is not responding (last reported: running)"

    k8s_cluster.store.patch("pods", NS, pod, {"status": {"phase": "Running"}})
    sweep()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == (S.RUNNING, "running")

    k8s_cluster.store.patch("pods", NS, pod, {"status": {"phase": "Unknown"}})
    sweep()
    assert Job.objects.get(pk=job.pk).state == S.RUNNING
    k8s_cluster.store.delete("pods", NS, pod)  # the node controller gives up on it
    k8s_cluster.reconcile()
    sweep()
    job.refresh_from_db()
    assert job.state == S.ERROR
    assert history(job)[-4:] == [
        (S.RUNNING, "the node gpu-node-1 is not responding (last reported: running)"),
        (S.RUNNING, "running"),
        (S.RUNNING, "the node gpu-node-1 is not responding (last reported: running)"),
        (S.ERROR, job.state_reason),
    ]


# 3. Stale observations


def test_a_stale_listing_never_moves_a_job_back(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    panel_s3: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from controlpanel.engine.sweep import record_observation

    job = start(submit(project, owner))
    pod = pod_of(k8s_cluster, job)
    stale = k8s_jobs.observe_all()  # the sweep lists: the pod waits
    k8s_cluster.kubelet.run(NS, pod)
    assert record_observation(k8s_jobs.observe_job(ref=job_ref(job)))  # the watcher is ahead
    job.refresh_from_db()
    assert job.state == S.RUNNING
    events = history(job)

    monkeypatch.setattr(k8s_jobs, "observe_all", lambda **kwargs: stale)
    assert sweep()["changed"] == 0  # the sweep applies its older listing
    job.refresh_from_db()
    assert (job.state, job.state_reason) == (S.RUNNING, "running")
    assert history(job) == events

    k8s_cluster.kubelet.finish(NS, pod, exit_code=4)
    assert record_observation(k8s_jobs.observe_job(ref=job_ref(job)))
    job.refresh_from_db()
    assert job.state == S.FAILED


def test_kueue_suspending_a_running_job_again_queues_it(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    """A lower state the cluster really is in (Kueue preempted the run) is read afresh."""
    project.kueue_queue = "team-a"
    project.save()
    job = start(submit(project, owner))
    name = names.job_name(job_ref(job))
    k8s_cluster.store.patch("jobs", NS, name, {"spec": {"suspend": False}})
    k8s_cluster.reconcile()
    k8s_cluster.kubelet.run(NS, pod_of(k8s_cluster, job))
    sweep()
    assert Job.objects.get(pk=job.pk).state == S.RUNNING
    k8s_cluster.store.patch("jobs", NS, name, {"spec": {"suspend": True}})  # preempted
    k8s_cluster.reconcile()
    sweep()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == (
        S.QUEUED,
        "waiting for admission by Kueue queue team-a",
    )


# 4. Reasons within a state


def test_a_new_reason_within_a_state_is_kept_once(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = start(submit(project, owner))
    pod = pod_of(k8s_cluster, job)
    assert job.state == S.PENDING
    for nodes in (3, 3, 4, 5):  # the same verdict, counted over a growing cluster
        k8s_cluster.kubelet.unschedulable(
            NS, pod, f"0/{nodes} nodes are available: {nodes} Insufficient nvidia.com/gpu."
        )
        sweep()
    job.refresh_from_db()
    assert job.state_reason == "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."
    k8s_cluster.kubelet.waiting(NS, pod, "main", "ImagePullBackOff", "Back-off pulling image")
    sweep()
    k8s_cluster.kubelet.run(NS, pod)
    sweep()
    job.refresh_from_db()
    assert history(job)[2:] == [
        (S.PENDING, "creating the pod"),
        (S.PENDING, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
        (S.PENDING, "ImagePullBackOff: Back-off pulling image"),
        (S.RUNNING, "running"),
    ]


def test_reasons_shown_on_the_page_and_in_the_api(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    from tests.fixtures.panel import api_client_for

    job = start(submit(project, owner))
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    k8s_cluster.kubelet.unschedulable(NS, pod_of(k8s_cluster, job), message)
    sweep()
    client = api_client_for(owner)
    client.force_login(owner)
    page = client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    timeline = page.split('data-testid="timeline"', 1)[1].split("</ol>", 1)[0]
    assert timeline.count(">PENDING<") == 2
    assert "creating the pod" in timeline and message in timeline
    answer = client.get(f"/api/v1/jobs/{job.pk}/?project=alpha")
    assert answer.status_code == 200
    assert [(e["state"], e["reason"]) for e in answer.json()["history"]][-2:] == [
        (S.PENDING, "creating the pod"),
        (S.PENDING, message),
    ]


def test_a_flapping_reason_stops_adding_events(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    """A reason that flips back and forth is recorded 20 times within a state, no more."""
    from controlpanel.engine.lifecycle import record_state

    job = start(submit(project, owner))
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        for i in range(100):
            record_state(locked, S.PENDING, "waiting for a node" if i % 2 else "quota full")
    job.refresh_from_db()
    assert job.state_reason == "waiting for a node"  # the row says it all the same
    assert job.events.filter(state=S.PENDING).count() == 1 + 20
