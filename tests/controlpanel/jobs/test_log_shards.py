"""Log collection that scales out (issue 26): the logs spread over watcher replicas (rendezvous
hashing over the replicas' Redis heartbeats, a silent replica's share taken over), each read
on its own with its own deadline, a printing pod's log followed as a stream (`follow=true`)
and resumed from the stored cursor, and a rotated log file's lost lines marked."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connections

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.collector import LogCollector
from controlpanel.engine.logs import MARK, collect_logs, follow_logs
from controlpanel.engine.models import JobLogLine
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.shards import Shard, owner
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from deploy import names
from tests.fixtures.jobs import submit

NS = "ajuste-alpha"


def stored(job: Job) -> list[str]:
    return list(JobLogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))


def wait_until(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.05)


def test_workloads_spread_over_the_members_and_a_leaving_member_moves_only_its_share() -> None:
    ids = [f"job-{i}" for i in range(1000)]
    three = {job: owner(job, ["a", "b", "c"]) for job in ids}
    counts = {m: sum(1 for o in three.values() if o == m) for m in "abc"}
    assert all(250 <= count <= 420 for count in counts.values()), counts
    two = {job: owner(job, ["a", "c"]) for job in ids}
    moved = [job for job in ids if two[job] != three[job]]
    assert moved and all(three[job] == "b" for job in moved)  # only b's share moves
    assert owner("job-1", []) is None


@pytest.mark.django_db
def test_a_replica_not_heard_from_is_dropped_and_the_others_take_its_share() -> None:
    first, second = Shard(identity="replica-a", ttl_s=2), Shard(identity="replica-b", ttl_s=2)
    first.beat()
    assert second.beat() == ["replica-a", "replica-b"] == first.beat()
    ids = [f"job-{i}" for i in range(100)]
    mine = [job for job in ids if second.owns(job)]
    assert 0 < len(mine) < 100 and not any(first.owns(job) for job in mine)
    # replica-a is killed: it beats no more; past the TTL replica-b owns everything.
    time.sleep(2.2)
    assert second.beat() == ["replica-b"]
    assert all(second.owns(job) for job in ids)
    # A clean shutdown lets go at once.
    first.beat()
    first.leave()
    assert second.beat() == ["replica-b"]


def running_job(
    cluster: Any, project: Project, owner_user: Any, name: str = "job"
) -> tuple[Job, str]:
    job = submit(project, owner_user, name=name)
    admit_jobs(project_id=project.pk)
    reconcile(str(job.pk))
    pod = cluster.pod_of(NS, names.job_name(job_ref(job)))
    cluster.kubelet.run(NS, pod)
    sweep()  # recorded RUNNING: a printing workload the collector reads
    return job, pod


def log_requests(cluster: Any, *, follow: bool) -> int:
    return sum(
        1
        for request in cluster.requests()
        if request.url.path.endswith("/log") and (request.params.get("follow") == "true") == follow
    )


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_a_printing_log_is_followed_as_one_stream_and_resumed_from_its_cursor(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    job, pod = running_job(k8s_cluster, project, owner)
    kubelet = k8s_cluster.kubelet
    kubelet.log(NS, pod, "one", "two")
    keep = threading.Event()
    keep.set()
    results: list[int] = []

    def follow() -> None:
        try:
            results.append(follow_logs(job_id=job.pk, keep=keep.is_set))
        finally:
            connections.close_all()

    thread = threading.Thread(target=follow)
    thread.start()
    try:
        wait_until(lambda: stored(job) == ["one", "two"], 10, "the first lines stored")
        for i in range(5):  # printed while followed: no new request, the stream brings them
            kubelet.log(NS, pod, f"line {i}")
            time.sleep(0.1)
        wait_until(lambda: len(stored(job)) == 7, 10, "the printed lines stored")
        assert log_requests(k8s_cluster, follow=True) == 1
        assert log_requests(k8s_cluster, follow=False) == 0
    finally:
        keep.clear()
        kubelet.log(NS, pod, "wakes the stream")  # the follower sees keep() at its next batch
        thread.join(10)
    assert results and results[0] >= 7
    # A break: printed while nobody followed, then a new stream from the stored cursor.
    kubelet.log(NS, pod, "while away", "and more")
    kubelet.finish(NS, pod, exit_code=0)
    keep.set()
    follow()
    collect_logs(job_id=job.pk)
    expected = ["one", "two", *(f"line {i}" for i in range(5)), "wakes the stream"]
    assert stored(job) == [*expected, "while away", "and more"]  # each line once, in order


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["read", "follow"])
def test_lines_lost_with_a_rotated_log_file_are_marked_not_silently_skipped(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, how: str
) -> None:
    job, pod = running_job(k8s_cluster, project, owner)
    kubelet = k8s_cluster.kubelet
    kubelet.log(NS, pod, "a", "b")
    collect_logs(job_id=job.pk)
    assert stored(job) == ["a", "b"]
    kubelet.log(NS, pod, "c", "d")  # printed, then rotated away before any read
    kubelet.rotate(NS, pod)
    time.sleep(0.01)
    kubelet.log(NS, pod, "e")
    if how == "read":
        collect_logs(job_id=job.pk)
    else:
        kubelet.finish(NS, pod, exit_code=0)  # the stream ends with the container
        follow_logs(job_id=job.pk, keep=lambda: True)
    lines = stored(job)
    assert lines[:2] == ["a", "b"] and lines[3:] == ["e"], lines
    assert lines[2].startswith(f"{MARK} — lines printed between ")
    assert lines[2].endswith(
        "skipped (log rotated: the kubelet rotated the log file before they were read) —"
    )
    # Read again: nothing more, no second mark.
    collect_logs(job_id=job.pk)
    assert len(stored(job)) == 4


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_one_stuck_log_read_holds_no_other_and_ends_at_its_deadline(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    k8s_jobs.logs.read_deadline_s = 1.0
    jobs = [running_job(k8s_cluster, project, owner, name=f"job-{i}") for i in range(2)]
    for job, pod in jobs:
        k8s_cluster.kubelet.log(NS, pod, f"{job.name} printed")
    held = k8s_cluster.hold_next("GET", "pods/log", seconds=30)
    collector = LogCollector(interval_s=0.05, idle_s=0.2)
    errors: list[Exception] = []

    def read(job_id: str) -> int:
        try:
            added, _ = collect_logs(job_id=job_id)
        except Exception as exc:
            errors.append(exc)
            return -1
        finally:
            connections.close_all()
        return added

    collector.collect = read
    names_of = {str(job.pk): job for job, _ in jobs}
    with ThreadPoolExecutor(4) as pool:

        def tick() -> None:
            collector.tick(submit=lambda job_id: pool.submit(read, job_id))
            time.sleep(0.05)

        deadline = time.monotonic() + 15
        while not any(stored(job) for job, _ in jobs):
            assert time.monotonic() < deadline, ([stored(job) for job, _ in jobs], errors)
            tick()
        # One log is stored while the other's read is still stuck: it held no other read.
        assert held.arrived.is_set() and not held.released.is_set()
        stuck = [job_id for job_id in collector._running if not stored(names_of[job_id])]
        assert len(stuck) == 1 and not collector._running[stuck[0]].done()
        while not all(stored(job) == [f"{job.name} printed"] for job, _ in jobs):
            assert time.monotonic() < deadline, ([stored(job) for job, _ in jobs], errors)
            tick()
    # The stuck read ended at its own deadline (1 s), not at the 30 s hold, and was read again.
    assert not held.released.is_set()
    held.release()
