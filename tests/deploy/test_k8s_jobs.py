"""The Kubernetes backend runs jobs against the emulated API server, through the official client."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.manifests.jobs import PUSH_BACKOFF_LIMIT
from deploy.types import JobRequest, Phase, ProjectRequest
from tests.deploy.conftest import (
    CPU,
    DATASET,
    OUTPUT,
    make_job_request,
    project_namespace,
    validate,
)
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.store import Obj

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("vision_namespace")]

NS = "ajuste-vision"
JOB = "job-42-r1"


def start(cluster: EmulatedCluster, backend: KubernetesBackend, job: JobRequest) -> str:
    """Submit the job and get its pod running; the pod's name."""
    backend.apply_job(job=job)
    pod = cluster.pod_of(NS, JOB)
    cluster.kubelet.run(NS, pod)
    return pod


def test_h100_job_with_ro_and_rw_volumes_end_to_end(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    kubelet = k8s_cluster.kubelet
    assert k8s_backend.apply_job(job=job_request).phase is Phase.PENDING
    stored = k8s_cluster.get("jobs", NS, JOB)
    assert stored is not None and k8s_cluster.get("persistentvolumeclaims", NS, "job-42-r1-ws")
    stored.pop("status", None)
    validate(stored)  # what reached the API server, server-set fields included
    pod = k8s_cluster.pod_of(NS, JOB)

    message = "0/12 nodes are available: 12 Insufficient nvidia.com/gpu."
    kubelet.unschedulable(NS, pod, message)
    assert k8s_backend.observe_job(ref=job_request.ref).reason == message

    kubelet.start_init(NS, pod, "pull")
    assert k8s_backend.observe_job(ref=job_request.ref).phase is Phase.INITIALIZING

    kubelet.run(NS, pod)
    running = k8s_backend.observe_job(ref=job_request.ref)
    uid = k8s_cluster.get("pods", NS, pod)["metadata"]["uid"]  # type: ignore[index]
    assert (running.phase, running.run_uid, running.node) == (Phase.RUNNING, uid, "gpu-node-1")
    assert running.started_at is not None and running.finished_at is None

    kubelet.finish(NS, pod, exit_code=0)
    ended = k8s_backend.observe_job(ref=job_request.ref)
    assert (ended.phase, ended.needs_apply, ended.exit_code) == (Phase.FINALIZING, True, 0)
    assert ended.finished_at is not None and ended.finished_at >= running.started_at

    pushing = k8s_backend.apply_job(job=job_request)
    assert (pushing.phase, pushing.needs_apply, pushing.push_attempt) == (
        Phase.FINALIZING,
        False,
        1,
    )
    kubelet.finish(NS, k8s_cluster.pod_of(NS, "job-42-r1-push-1"), exit_code=0)
    done = k8s_backend.observe_job(ref=job_request.ref)
    assert (done.phase, done.exit_code, done.push_attempt) == (Phase.SUCCEEDED, 0, 1)
    assert (done.started_at, done.finished_at, done.run_uid) == (
        running.started_at,
        ended.finished_at,
        uid,
    )

    k8s_backend.delete_job(ref=job_request.ref)
    assert k8s_backend.observe_job(ref=job_request.ref).phase is Phase.GONE
    assert k8s_cluster.list("jobs") == k8s_cluster.list("pods") == []
    # The claim went Terminating; its protection goes with the last pod that mounted it.
    k8s_cluster.reconcile()
    assert k8s_cluster.list("persistentvolumeclaims") == []


def test_duplicate_and_concurrent_applies_create_nothing_twice(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    threads = [
        threading.Thread(target=k8s_backend.apply_job, kwargs={"job": job_request})
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    k8s_backend.apply_job(job=job_request)
    assert [j["metadata"]["name"] for j in k8s_cluster.list("jobs")] == [JOB]
    assert len(k8s_cluster.list("persistentvolumeclaims")) == 1
    assert len(k8s_cluster.list("pods")) == 1


def test_pending_reasons_quote_the_kubelet_and_the_quota(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    k8s_backend.apply_job(job=job_request)
    pod = k8s_cluster.pod_of(NS, JOB)
    k8s_cluster.kubelet.run(NS, pod)
    pulled = 'Back-off pulling image "registry.example/train:1.0"'
    k8s_cluster.kubelet.waiting(NS, pod, "main", "ImagePullBackOff", pulled)
    observed = k8s_backend.observe_job(ref=job_request.ref)
    assert (observed.phase, observed.reason) == (Phase.PENDING, f"ImagePullBackOff: {pulled}")

    project = ProjectRequest(slug="vision", namespace=NS, gpu_quota=2)
    k8s_backend.ensure_project(project=project)
    second = replace(job_request, id="43")
    assert k8s_backend.apply_job(job=second).phase is Phase.PENDING
    reason = k8s_backend.observe_job(ref=second.ref).reason
    # The Job controller's FailedCreate event, quoted: the stable part of the server's 403.
    assert reason.startswith('cannot create the pod: Error creating: pods "job-43-r1-" is')
    assert "exceeded quota: ajuste-quota, requested: requests.nvidia.com/gpu=2" in reason


def test_failure_reports_exit_code_and_last_words(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    job = make_job_request(flavor=CPU, units=1, volumes=())
    pod = start(k8s_cluster, k8s_backend, job)
    k8s_cluster.kubelet.finish(NS, pod, exit_code=3, message="epoch 1\nValueError: bad row 17\n")
    observed = k8s_backend.observe_job(ref=job.ref)
    assert (observed.phase, observed.exit_code) == (Phase.FAILED, 3)
    assert observed.reason == "exit code 3: ValueError: bad row 17"
    assert not observed.needs_apply  # no rw volume: nothing to push


def test_failed_pull_fails_before_the_users_code_and_pushes_nothing(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    k8s_backend.apply_job(job=job_request)
    pod = k8s_cluster.pod_of(NS, JOB)
    k8s_cluster.kubelet.fail_init(NS, pod, "pull", 2, "bad volume spec: bucket missing\n")
    observed = k8s_backend.apply_job(job=job_request)
    assert (observed.phase, observed.reason, observed.started_at) == (
        Phase.FAILED,
        "volume pull failed: bad volume spec: bucket missing",
        None,
    )
    assert k8s_cluster.get("jobs", NS, "job-42-r1-push-1") is None  # a partial pull is not pushed


def test_timeout_kills_the_pod_and_still_pushes(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    start(k8s_cluster, k8s_backend, job_request)
    k8s_cluster.advance(job_request.timeout_s + 1)
    observed = k8s_backend.observe_job(ref=job_request.ref)
    assert (observed.phase, observed.needs_apply) == (Phase.FINALIZING, True)
    k8s_backend.apply_job(job=job_request)
    k8s_cluster.kubelet.finish(NS, k8s_cluster.pod_of(NS, "job-42-r1-push-1"))
    observed = k8s_backend.observe_job(ref=job_request.ref)
    assert (observed.phase, observed.timed_out, observed.reason) == (
        Phase.FAILED,
        True,
        "timed out after 3600 s",
    )


def test_stop_ends_a_running_job_as_stopped(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    job = make_job_request(volumes=(DATASET,))
    pod = start(k8s_cluster, k8s_backend, job)
    k8s_backend.stop_job(job=job)
    stored = k8s_cluster.get("jobs", NS, JOB)
    assert stored is not None and stored["spec"]["activeDeadlineSeconds"] == 1
    k8s_cluster.advance(2)
    observed = k8s_backend.observe_job(ref=job.ref)
    assert (observed.phase, observed.reason) == (Phase.STOPPED, "stopped at the user's request")
    assert k8s_cluster.get("pods", NS, pod) is None
    k8s_backend.stop_job(job=job)  # stopping a stopped job changes nothing
    assert k8s_backend.observe_job(ref=job.ref).phase is Phase.STOPPED


def test_kueue_job_waits_queued_and_can_be_stopped_before_admission(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    job = make_job_request(queue_name="team-gpu")
    observed = k8s_backend.apply_job(job=job)
    assert (observed.phase, observed.reason) == (
        Phase.QUEUED,
        "waiting for admission by Kueue queue team-gpu",
    )
    assert k8s_cluster.list("pods") == []
    k8s_backend.stop_job(job=job)
    assert k8s_backend.observe_job(ref=job.ref).phase is Phase.STOPPED

    admit(k8s_cluster)  # Kueue admits it later anyway: no pod may start
    for seconds in (0, 2):
        k8s_cluster.advance(seconds)  # and its deadline passes
        observed = k8s_backend.apply_job(job=job)  # what the panel's reconcile calls
        assert (observed.phase, observed.reason, observed.needs_apply) == (
            Phase.STOPPED,
            "stopped before it started",
            False,
        )
        assert k8s_cluster.list("pods") == []
    assert k8s_cluster.get("jobs", NS, "job-42-r1-push-1") is None  # it never ran: no push


def admit(cluster: EmulatedCluster) -> None:
    """What Kueue does once the quota allows: unsuspend the Job."""
    cluster.store.patch("jobs", NS, JOB, {"spec": {"suspend": False}})
    cluster.reconcile()


def test_kueue_admitting_while_the_stop_is_decided_stops_the_running_job(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = make_job_request(queue_name="team-gpu", volumes=())
    k8s_backend.apply_job(job=job)
    patch = k8s_backend.api.patch

    def admitted_first(*args: Any) -> Obj:
        if k8s_cluster.get("jobs", NS, JOB)["spec"].get("suspend"):  # type: ignore[index]
            admit(k8s_cluster)  # between the stop's read and its patch
            k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, JOB))
        return patch(*args)

    monkeypatch.setattr(k8s_backend.api, "patch", admitted_first)
    k8s_backend.stop_job(job=job)
    stored = k8s_cluster.get("jobs", NS, JOB)
    assert stored is not None and stored["spec"]["activeDeadlineSeconds"] == 1
    assert stored["spec"]["parallelism"] == 1  # the server's default: a running Job's stop
    k8s_cluster.advance(2)
    observed = k8s_backend.observe_job(ref=job.ref)
    assert (observed.phase, observed.reason) == (Phase.STOPPED, "stopped at the user's request")
    assert k8s_cluster.list("pods") == []


def test_failed_push_keeps_the_data_and_can_be_retried(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    pod = start(k8s_cluster, k8s_backend, job_request)
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    k8s_backend.retry_push(job=job_request)  # not SYNC_FAILED: nothing to retry
    assert k8s_cluster.get("jobs", NS, "job-42-r1-push-1") is None
    k8s_backend.apply_job(job=job_request)
    for attempt in range(PUSH_BACKOFF_LIMIT + 1):  # the Job controller retries the pod
        if attempt:
            k8s_cluster.back_off()
        assert k8s_backend.observe_job(ref=job_request.ref).phase is Phase.FINALIZING
        failing = k8s_cluster.pod_of(NS, "job-42-r1-push-1")
        k8s_cluster.kubelet.finish(
            NS, failing, exit_code=1, message=f"{attempt + 1} file(s) failed"
        )
    assert len(k8s_cluster.pods_of(NS, "job-42-r1-push-1")) == PUSH_BACKOFF_LIMIT + 1
    failed = k8s_backend.observe_job(ref=job_request.ref)
    assert (failed.phase, failed.reason) == (
        Phase.SYNC_FAILED,
        f"final push failed: {PUSH_BACKOFF_LIMIT + 1} file(s) failed",
    )
    assert k8s_backend.apply_job(job=job_request).phase is Phase.SYNC_FAILED  # no auto-retry
    assert k8s_cluster.get("persistentvolumeclaims", NS, "job-42-r1-ws") is not None

    k8s_backend.retry_push(job=job_request)
    k8s_cluster.kubelet.finish(NS, k8s_cluster.pod_of(NS, "job-42-r1-push-2"))
    done = k8s_backend.observe_job(ref=job_request.ref)
    assert (done.phase, done.push_attempt) == (Phase.SUCCEEDED, 2)


def test_evicted_pod_is_a_platform_error(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    job = make_job_request(volumes=())
    pod = start(k8s_cluster, k8s_backend, job)
    status = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."}
    status["containerStatuses"] = []
    k8s_cluster.store.patch("pods", NS, pod, {"status": status})
    k8s_cluster.reconcile()
    observed = k8s_backend.observe_job(ref=job.ref)
    assert (observed.phase, observed.reason) == (
        Phase.ERROR,
        "pod failed: Evicted: The node was low on memory.",
    )


def test_a_pod_whose_node_stopped_reporting_is_live_until_it_is_really_gone(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    """Phase Unknown: the node lost contact, the container may still run and may come back.
    It is no outcome: the run stays where it was, with the reason; it ends only when the pod
    really goes (the node controller deletes it, the Job controller fails the Job)."""
    job = make_job_request(volumes=())
    pod = start(k8s_cluster, k8s_backend, job)
    k8s_cluster.store.patch("pods", NS, pod, {"status": {"phase": "Unknown"}})
    k8s_cluster.reconcile()
    lost = k8s_backend.observe_job(ref=job.ref)
    assert (lost.phase, lost.reason) == (
        Phase.RUNNING,
        "the node gpu-node-1 is not responding (last reported: running)",
    )
    assert not lost.phase.is_final
    assert [o.phase for o in k8s_backend.observe_all()] == [Phase.RUNNING]

    k8s_cluster.store.patch("pods", NS, pod, {"status": {"phase": "Running"}})  # back
    k8s_cluster.reconcile()
    back = k8s_backend.observe_job(ref=job.ref)
    assert (back.phase, back.reason) == (Phase.RUNNING, "running")

    k8s_cluster.store.patch("pods", NS, pod, {"status": {"phase": "Unknown"}})
    k8s_cluster.store.delete("pods", NS, pod)  # the node controller gives up on it
    k8s_cluster.reconcile()
    gone = k8s_backend.observe_job(ref=job.ref)
    assert gone.phase is Phase.ERROR
    assert gone.reason.startswith("pod failed: BackoffLimitExceeded")


def test_observe_all_reports_each_run_once(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    second_run = replace(job_request, run=2)
    other = replace(
        job_request, id="99", namespace=project_namespace(k8s_cluster, "nlp"), project="nlp"
    )
    for job in (job_request, second_run, other):
        k8s_backend.apply_job(job=job)
    k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, JOB))
    everything = {(o.namespace, o.id, o.run): o.phase for o in k8s_backend.observe_all()}
    assert everything == {
        (NS, "42", 1): Phase.RUNNING,
        (NS, "42", 2): Phase.PENDING,
        ("ajuste-nlp", "99", 1): Phase.PENDING,
    }
    assert [o.id for o in k8s_backend.observe_all(namespace="ajuste-nlp")] == ["99"]


def test_a_steady_listing_costs_six_calls_and_still_sees_every_change(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    """The sweep's listing reuses the observation of a run none of whose objects changed
    (same uid and resourceVersion); a changed pod, or the events of an unscheduled one (they
    change without the pod), are read again. Six list calls, however many runs."""
    jobs = [make_job_request(id=str(n), volumes=()) for n in range(5)]
    for job in jobs:
        k8s_backend.apply_job(job=job)
    for job in jobs[1:]:
        k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, f"job-{job.id}-r1"))
    first = k8s_backend.observe_all()
    calls = len(k8s_cluster.requests())
    assert k8s_backend.observe_all() == first
    listed = [r.url.path for r in k8s_cluster.requests()[calls:]]
    # namespaces, JobSets (jobs of several nodes; a 404 where JobSet is not installed), Jobs,
    # pods, StatefulSets, Deployments (no app: no ReplicaSets); events of job 0
    assert len(listed) == 6 + 1
    assert listed[-1].endswith("/events")

    waiting = k8s_cluster.pod_of(NS, "job-0-r1")
    message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    k8s_cluster.kubelet.event(NS, waiting, reason="FailedScheduling", message=message)
    k8s_cluster.kubelet.finish(NS, k8s_cluster.pod_of(NS, "job-3-r1"), exit_code=2)
    seen = {o.id: (o.phase, o.reason) for o in k8s_backend.observe_all()}
    assert seen["0"] == (Phase.PENDING, message)
    assert seen["3"] == (Phase.FAILED, "exit code 2")
    assert seen["1"] == (Phase.RUNNING, "running")


def test_the_final_push_reports_its_conflicts_through_its_termination_message(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    pod = start(k8s_cluster, k8s_backend, job_request)
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    k8s_backend.apply_job(job=job_request)
    push = k8s_cluster.get("jobs", NS, "job-42-r1-push-1")
    assert push is not None
    command = push["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-2:] == ["--summary-file", "/dev/termination-log"]
    # What `storage.sync --summary-file` wrote there, as the kubelet hands it back.
    summary = (
        '{"event": "push", "uploaded": 3, "deleted": 0, "failed": 0, '
        '"conflicts": ["output/a.txt", "output/b.txt"], "conflicts_total": 9, "final": true}'
    )
    k8s_cluster.kubelet.finish(NS, k8s_cluster.pod_of(NS, "job-42-r1-push-1"), message=summary)
    done = k8s_backend.observe_job(ref=job_request.ref)
    assert (done.phase, done.push_note) == (
        Phase.SUCCEEDED,
        "pushed with 9 conflicts: output/a.txt, output/b.txt and 7 more; "
        "the remote copies were kept",
    )


def test_the_namespace_quota_counts_cpu_memory_and_pods(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    project = ProjectRequest(
        slug="vision", namespace=NS, gpu_quota=0, cpu_quota=3, memory_gib_quota=100, pod_quota=5
    )
    k8s_backend.ensure_project(project=project)
    first = make_job_request(flavor=CPU, units=1, volumes=())  # 2 vCPU, 4 GiB
    assert k8s_backend.apply_job(job=first).phase is Phase.PENDING
    assert k8s_cluster.pod_of(NS, "job-42-r1")
    # The push sidecar counts too: 2 vCPU + 250m for a job with an rw volume, over 3 in all.
    second = make_job_request(id="43", flavor=CPU, units=1, volumes=(OUTPUT,))
    k8s_backend.apply_job(job=second)
    reason = k8s_backend.observe_job(ref=second.ref).reason
    assert "exceeded quota: ajuste-quota, requested: requests.cpu=" in reason
    assert "limited: requests.cpu=3" in reason


def test_a_released_workspace_frees_the_storage_quota_its_ended_pods_held(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    """A pod that mounts a claim holds it (Terminating, still counted by the namespace's
    storage quota) even once it has ended: releasing the workspace removes the run's ended
    pods with its claim, so the next run's claim fits."""
    k8s_backend.ensure_project(
        project=ProjectRequest(slug="vision", namespace=NS, gpu_quota=0, storage_gib_quota=60)
    )
    first = make_job_request(flavor=CPU, units=1, volumes=(OUTPUT,))  # a 50 GiB workspace
    k8s_cluster.kubelet.finish(NS, start(k8s_cluster, k8s_backend, first), exit_code=0)
    k8s_backend.apply_job(job=first)  # the push
    k8s_cluster.kubelet.finish(NS, k8s_cluster.pod_of(NS, "job-42-r1-push-1"), exit_code=0)
    assert k8s_backend.observe_job(ref=first.ref).phase is Phase.SUCCEEDED
    k8s_backend.release_workspace(ref=first.ref)
    assert k8s_cluster.get("persistentvolumeclaims", NS, "job-42-r1-ws") is None
    second = make_job_request(id="43", flavor=CPU, units=1, volumes=(OUTPUT,))
    k8s_backend.apply_job(job=second)
    assert k8s_cluster.get("persistentvolumeclaims", NS, "job-43-r1-ws") is not None
    assert k8s_cluster.list("events", NS) == []  # no claim nor pod refused
    assert k8s_backend.observe_job(ref=first.ref).phase is Phase.SUCCEEDED  # its Job says so
