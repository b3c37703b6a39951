"""A run made while the sweep's list calls are under way (deploy/kubernetes/sweep.py).

The sweep lists Jobs, pods and the rest one call after the other, and the watch follows pods
from the pod list's resourceVersion. Were pods listed after Jobs, a run whose Job and running
pod were made between the two calls would show its pod without its Job; a pod no listed Job
controls counts for nothing, so the run was observed GONE ("no object of this run exists"), and
the watch, starting after the pod's last change, would not say otherwise until its next relist
(minutes). Pods are listed first: whatever changes after that
list reaches the watch as an event, and a run made meanwhile is a Job waiting for its pod.

Each test holds the sweep's pod list (the emulator's `hold_next`) while the run is made and its
pod started, then lets the list go on."""

from __future__ import annotations

import queue
import threading
from dataclasses import replace

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.types import JobRequest, ObservedWorkload, Phase
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.server import Hold

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("vision_namespace")]
NS = "ajuste-vision"
WAIT_S = 20.0


def start_the_run_meanwhile(
    cluster: EmulatedCluster, backend: KubernetesBackend, job: JobRequest, hold: Hold
) -> None:
    """Once the sweep's pod list is held: the run's Job is made and its pod runs."""
    assert hold.wait_arrived(WAIT_S), "the sweep never listed pods"
    backend.apply_job(job=job)
    cluster.kubelet.run(NS, cluster.pod_of(NS, "job-43-r1"))
    hold.release()


def test_the_watch_sees_a_run_made_while_it_lists(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    """No relist for five minutes: the events alone must show the run running."""
    job = replace(job_request, id="43", volumes=())
    hold = k8s_cluster.hold_next("GET", "pods", watch=False, seconds=WAIT_S)
    stop, seen = threading.Event(), queue.Queue[ObservedWorkload]()

    def follow() -> None:
        for observed in k8s_backend.watch(stop=stop, resync_s=300.0):
            seen.put(observed)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        start_the_run_meanwhile(k8s_cluster, k8s_backend, job, hold)
        yielded: list[ObservedWorkload] = []
        while not (yielded and yielded[-1].phase is Phase.RUNNING):
            try:
                yielded.append(seen.get(timeout=WAIT_S))
            except queue.Empty:
                raise AssertionError(f"the run never showed running: {yielded}") from None
    finally:
        stop.set()
        thread.join(WAIT_S)
    assert {o.id for o in yielded} == {"43"}
    assert Phase.ERROR not in {o.phase for o in yielded}, yielded


def test_the_sweep_sees_a_run_made_while_it_lists_running(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend, job_request: JobRequest
) -> None:
    """The sweep's own observation (the beat's safety net records it into the row): a Job and
    its running pod, never a pod without its Job (that is GONE: no object of the run)."""
    job = replace(job_request, id="43", volumes=())
    hold = k8s_cluster.hold_next("GET", "pods", watch=False, seconds=WAIT_S)
    result: list[list[ObservedWorkload]] = []
    thread = threading.Thread(target=lambda: result.append(k8s_backend.observe_all()))
    thread.start()
    try:
        start_the_run_meanwhile(k8s_cluster, k8s_backend, job, hold)
    finally:
        hold.release()
        thread.join(WAIT_S)
    assert result, "the sweep did not end"
    [observed] = result[0]
    assert (observed.id, observed.phase) == ("43", Phase.RUNNING), observed
    assert observed.started_at is not None
