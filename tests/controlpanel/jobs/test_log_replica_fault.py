"""A watcher replica SIGKILLed mid-stream (issue 26): two real `manage.py watch_workloads`
processes share the logs of printing jobs on the Kubernetes emulator (engine/shards.py), one
is killed while every job prints, and the other takes its share over within the TTL; every
job's stored log is then exactly what its pod printed: each line once, in order, none missing.

The test is the kubelet: a thread prints a line to every pod every `PRINT_EVERY_S`. The first
replica starts alone and follows every log; the second joins (the logs of its share move,
read from the stored cursor while the first may still be reading them); a third reader reads
every log beside them for a while (the cursor check of `logs._commit` keeps each line once);
then one of them is killed. Between moves each log is
one stream: no follow request is opened again while the owners stay the same."""

from __future__ import annotations

import difflib
import sys
import threading
import time
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connections

from controlpanel.engine.logs import collect_logs
from controlpanel.engine.models import JobLogLine
from controlpanel.engine.shards import owner as owner_of
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from tests.controlpanel.jobs.test_log_shards import running_job
from tests.fixtures.processes import Processes, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.k8s,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]
NS = "ajuste-alpha"
JOBS = 8
TTL_S = 4  # LOG_SHARD_TTL_SECONDS of both replicas
TAKE_OVER_S = 15  # the bound: a dead replica's logs are taken over within it
PRINT_EVERY_S = 0.1
STEADY_S = 4  # a window with the owners unchanged: each log one stream, none reopened
SETTLE_S = 25  # such a window comes within this once the owners changed


class Printer(threading.Thread):
    """The pods' processes: each prints a numbered line every PRINT_EVERY_S; what was printed
    is kept per job, in order."""

    def __init__(self, cluster: Any, pods: dict[str, str]) -> None:
        super().__init__(daemon=True, name="printer")
        self.cluster, self.pods = cluster, pods
        self.printed: dict[str, list[str]] = {job_id: [] for job_id in pods}
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.wait(PRINT_EVERY_S):
            n += 1
            for job_id, pod in self.pods.items():
                line = f"{job_id[:8]} line {n}"
                self.cluster.kubelet.log(NS, pod, line)
                self.printed[job_id].append(line)


def stored(job_id: str) -> list[str]:
    rows = JobLogLine.objects.filter(job_id=job_id).order_by("seq")
    return list(rows.values_list("text", flat=True))


def members() -> list[str]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    key = f"{settings.REDIS_KEY_PREFIX}:log-shards"
    return sorted(item.decode() for item in client.zrange(key, 0, -1))


def follows(cluster: Any, pods: dict[str, str]) -> dict[str, int]:
    """follow=true requests opened so far, per job."""
    counts = dict.fromkeys(pods, 0)
    by_pod = {pod: job_id for job_id, pod in pods.items()}
    for request in cluster.requests():
        parts = request.url.path.split("/")
        if parts[-1] == "log" and request.params.get("follow") == "true":
            job_id = by_pod.get(parts[-2])
            if job_id is not None:
                counts[job_id] += 1
    return counts


def one_stream_each(cluster: Any, pods: dict[str, str], printer: Printer, what: str) -> None:
    """Once the owners stay the same, every log is stored through the one stream already open:
    within SETTLE_S comes a window of STEADY_S in which no log is opened again, lines still
    stored. (Two replicas following one log race, and the loser reopens it after every batch
    it lost: such a window never comes.)"""
    deadline = time.monotonic() + SETTLE_S
    while True:
        before = follows(cluster, pods)
        mark = {job_id: len(printer.printed[job_id]) for job_id in pods}
        time.sleep(STEADY_S)
        after = follows(cluster, pods)
        reopened = {job_id: after[job_id] - before[job_id] for job_id in pods}
        if not any(reopened.values()):
            break
        assert time.monotonic() < deadline, f"logs still opened again {what}: {reopened}"
    wait_for(lambda: all(len(stored(j)) >= mark[j] for j in pods), 15, f"lines stored {what}")


def third_reader(job_ids: list[str], *, seconds: float) -> None:
    """Reads every log beside the replicas for `seconds`, as a replica that has not yet seen
    a new member does for up to a heartbeat (or a finalize's archive beside the follower):
    only one reader's batch from a cursor is stored, the others' are dropped."""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for job_id in job_ids:
                collect_logs(job_id=job_id)
    finally:
        connections.close_all()


def test_a_replica_killed_mid_stream_its_logs_are_taken_over_each_line_once(
    k8s_cluster: Any,
    k8s_jobs: Any,
    panel_s3: Any,
    processes: Any,
    project: Project,
    owner: Any,
) -> None:
    project.gpu_quota = JOBS
    project.save(update_fields=["gpu_quota"])
    pods = {}
    for i in range(JOBS):
        job, pod = running_job(k8s_cluster, project, owner, name=f"job-{i}")
        pods[str(job.pk)] = pod
    env = {
        "COMPUTE_BACKEND": "kubernetes",
        "KUBECONFIG": k8s_cluster.kubeconfig,
        "LOG_SHARD_TTL_SECONDS": str(TTL_S),
        "S3_ENDPOINT_URL": panel_s3.endpoint_url,
        "S3_ACCESS_KEY": panel_s3.access_key,
        "S3_SECRET_KEY": panel_s3.secret_key,
        "S3_ALIAS": "LOCAL",
    }
    replicas: dict[str, Processes] = {}

    def start(name: str) -> None:
        procs: Processes = processes(env | {"HOSTNAME": name})
        procs.start(name, sys.executable, "manage.py", "watch_workloads")
        replicas[name] = procs

    printer = Printer(k8s_cluster, pods)
    printer.start()
    try:
        start("watcher-a")
        procs = replicas["watcher-a"]
        wait_for(lambda: all(stored(j) for j in pods), 60, "watcher-a storing every log", procs)
        one_stream_each(k8s_cluster, pods, printer, "by watcher-a alone")

        start("watcher-b")
        wait_for(lambda: len(members()) == 2, 30, "watcher-b a member", procs)
        both = members()
        share = {m: [j for j in pods if owner_of(j, both) == m] for m in both}
        assert all(share.values()), f"a replica owns no log of {JOBS}: {share}"
        one_stream_each(k8s_cluster, pods, printer, "by two replicas")
        third_reader(list(pods), seconds=3)

        # SIGKILL watcher-b mid-stream: no leave, its heartbeat just stops.
        dead = next(m for m in both if m.startswith("watcher-b"))
        victims = share[dead]
        at_kill = {j: len(stored(j)) for j in victims}
        killed = time.monotonic()
        replicas["watcher-b"].kill("watcher-b")
        wait_for(
            lambda: all(len(stored(j)) > at_kill[j] + 2 for j in victims),
            TAKE_OVER_S + 10,
            "the killed replica's logs stored again",
            procs,
        )
        took = time.monotonic() - killed
        assert took <= TAKE_OVER_S, f"its logs were taken over after {took:.1f} s"
        assert members() == [m for m in both if m != dead]
        one_stream_each(k8s_cluster, pods, printer, "by the survivor")
    finally:
        printer.stop.set()
        printer.join(5)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # then the comparison says what is missing
        if all(len(stored(j)) >= len(printer.printed[j]) for j in pods):
            break
        time.sleep(0.25)
    time.sleep(1)  # a line stored twice would come now
    for job_id in pods:
        name = Job.objects.values_list("name", flat=True).get(pk=job_id)
        lines, printed = stored(job_id), printer.printed[job_id]
        assert lines == printed, (
            f"{name}: {len(lines)} stored, {len(printed)} printed\n"
            + ("\n".join(difflib.unified_diff(printed, lines, lineterm="", n=1))[:3000])
        )
        seqs = list(JobLogLine.objects.filter(job_id=job_id).values_list("seq", flat=True))
        assert sorted(seqs) == list(range(1, len(printed) + 1))
        assert Job.objects.get(pk=job_id).log_lines == len(printed)
