"""Followed logs hold no PostgreSQL connection each (issue 26): the threads that wait on the
pods' `follow=true` streams hand their batches to the replica's LOG_WRITERS writer threads
(engine/logwriters.py), so a watcher's connections are bounded by its writers, not by the logs
it follows; every line is still stored once, in order."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.collector import LogCollector, follow_while_owned
from controlpanel.engine.logs import follow_logs
from controlpanel.engine.logwriters import LogWriters, WritersStopped
from controlpanel.engine.models import JobLogLine
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.projects.models import Project
from deploy import names
from tests.controlpanel.jobs.test_log_shards import running_job, wait_until
from tests.fixtures.jobs import submit

NS = "ajuste-alpha"
LOGS = 50
WRITERS = 3


def stored(job_id: str) -> list[str]:
    rows = JobLogLine.objects.filter(job_id=job_id).order_by("seq")
    return list(rows.values_list("text", flat=True))


def others_connected() -> int:
    """Connections to this test's database other than the test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def follow_requests(cluster: Any) -> int:
    return sum(
        1
        for request in cluster.requests()
        if request.url.path.endswith("/log") and request.params.get("follow") == "true"
    )


class Printer(threading.Thread):
    """The pods' processes: a numbered line to every pod every 0.2 s, kept per job."""

    def __init__(self, cluster: Any, pods: dict[str, str]) -> None:
        super().__init__(daemon=True, name="printer")
        self.cluster, self.pods = cluster, pods
        self.printed: dict[str, list[str]] = {job_id: [] for job_id in pods}
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.wait(0.2):
            n += 1
            for job_id, pod in self.pods.items():
                self.cluster.kubelet.log(NS, pod, f"line {n}")
                self.printed[job_id].append(f"line {n}")


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_fifty_followed_logs_hold_only_the_writers_connections_and_store_every_line(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, settings: Any
) -> None:
    project.gpu_quota, project.cpu_quota, project.memory_gib_quota = LOGS, 0, 0
    project.save(update_fields=["gpu_quota", "cpu_quota", "memory_gib_quota"])
    pods = {}
    for i in range(LOGS):  # running_job's steps, one sweep for all
        job = submit(project, owner, name=f"job-{i}")
        admit_jobs(project_id=project.pk)
        reconcile(str(job.pk))
        pod = k8s_cluster.pod_of(NS, names.job_name(job_ref(job)))
        k8s_cluster.kubelet.run(NS, pod)
        pods[str(job.pk)] = pod
    sweep()  # all RUNNING: printing workloads the collector follows
    baseline = others_connected()
    printer = Printer(k8s_cluster, pods)
    stop = threading.Event()
    writers = LogWriters(WRITERS).start()
    collector = LogCollector(  # as watch_workloads assembles it
        interval_s=0.05,
        idle_s=0.2,
        threads=LOGS + 8,
        collect=follow_while_owned(None, stop, db=writers.run),
    )

    def collect() -> None:
        try:
            collector.run(stop)
        finally:
            connections.close_all()

    loop = threading.Thread(target=collect, name="logs", daemon=True)
    printer.start()
    loop.start()
    peak = 0
    try:
        wait_until(lambda: all(stored(j) for j in pods), 60, "every log stored")
        # Every log is followed (one stream each, open), and lines keep coming: the
        # connections of the collector stay its writers' and its round's.
        seen = {j: len(stored(j)) for j in pods}
        for _ in range(10):
            peak = max(peak, others_connected() - baseline)
            time.sleep(0.2)
        wait_until(lambda: all(len(stored(j)) > seen[j] for j in pods), 30, "lines go on")
        assert follow_requests(k8s_cluster) >= LOGS
    finally:
        printer.stop.set()
        printer.join(5)
        time.sleep(1)  # the last lines reach the streams
        wait_until(
            lambda: all(len(stored(j)) >= len(printer.printed[j]) for j in pods),
            30,
            "the last lines stored",
        )
        stop.set()
        for pod in pods.values():  # wakes each stream: its follower sees stop at its batch
            k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
        loop.join(15)
        writers.stop()
    assert peak <= WRITERS + 1, f"{peak} connections for {LOGS} followed logs"
    for job_id in pods:  # each line once, in order
        assert stored(job_id) == printer.printed[job_id]
    wait_until(lambda: others_connected() <= baseline, 10, "the writers' connections closed")


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_the_thread_that_follows_a_log_opens_no_connection_of_its_own(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    job, pod = running_job(k8s_cluster, project, owner)
    k8s_cluster.kubelet.log(NS, pod, "one", "two")
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    opened: list[bool] = []
    with LogWriters(1) as writers:

        def follow() -> None:
            follow_logs(job_id=job.pk, keep=lambda: True, db=writers.run)
            opened.append(connections["default"].connection is not None)

        thread = threading.Thread(target=follow)
        thread.start()
        thread.join(20)
    assert opened == [False]  # the writer stored the lines
    assert stored(str(job.pk)) == ["one", "two"]
    with pytest.raises(WritersStopped):  # a stopped replica's readers store nothing more
        writers.run(lambda: 1)


def test_a_step_runs_on_a_writer_thread_and_its_error_reaches_the_reader() -> None:
    with LogWriters(2) as writers:
        assert writers.run(lambda: threading.current_thread().name).startswith("log-writer-")

        def fails() -> None:
            raise ValueError("no such cursor")

        with pytest.raises(ValueError, match="no such cursor"):
            writers.run(fails)
        assert writers.run(lambda: 7) == 7  # the writer goes on
    with pytest.raises(ValueError):
        LogWriters(0)
