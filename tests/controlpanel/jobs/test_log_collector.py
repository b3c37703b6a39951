"""The log collector (the watcher's, collector.py): it stores the log of every running job
whether anyone watches or not, never stores a line twice, never stalls on a read it cannot take
whole, and pages and the API only read what it stored (no GET reaches the cluster)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import close_old_connections, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from controlpanel.engine import backend as job_backend
from controlpanel.engine import logs
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.collector import LogCollector, note_followed
from controlpanel.engine.models import JobLogLine
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy import names
from deploy.kubernetes.logs import MAX_BYTES
from deploy.types import LogChunk
from tests.fixtures.jobs import submit

pytestmark = [pytest.mark.k8s, pytest.mark.django_db(transaction=True)]
NS = "ajuste-alpha"


def running_job(k8s_cluster: Any, project: Project, owner: Any) -> tuple[Job, str]:
    job = submit(project, owner)
    admit_jobs(project_id=project.pk)
    reconcile(str(job.pk))
    pod = k8s_cluster.pod_of(NS, names.job_name(job_ref(job)))
    k8s_cluster.kubelet.run(NS, pod)
    sweep()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    return job, pod


def stored(job: Job) -> list[str]:
    return list(JobLogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))


def test_the_log_is_stored_while_nobody_watches(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    job, pod = running_job(k8s_cluster, project, owner)
    collector = LogCollector()
    k8s_cluster.kubelet.log(NS, pod, "one", "two")
    assert collector.tick() == [str(job.pk)]
    k8s_cluster.kubelet.log(NS, pod, "three")
    collector._due.clear()  # due again at once (the test does not wait for the interval)
    collector.tick()
    assert stored(job) == ["one", "two", "three"]
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    sweep()
    assert collector.tick() == []  # an ended job is the finalize task's to archive


def test_pages_and_the_api_make_no_cluster_call_however_many_watch(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    owner_client: Client,
    owner_api: APIClient,
) -> None:
    job, pod = running_job(k8s_cluster, project, owner)
    k8s_cluster.kubelet.log(NS, pod, "hello")
    LogCollector().tick()
    before = k8s_cluster.request_count
    base = f"/p/alpha/jobs/{job.pk}/"
    for _ in range(10):  # ten viewers polling
        for url in (base, base + "status/", base + "logs/?after=0", "/p/alpha/jobs/"):
            assert owner_client.get(url, HTTP_HX_REQUEST="true").status_code == 200
        page = owner_api.get(f"/api/v1/jobs/{job.pk}/logs/?project=alpha")
        assert [x["text"] for x in page.json()["lines"]] == ["hello"]
    assert k8s_cluster.request_count == before


def test_two_collectors_at_once_store_each_line_once(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    job, pod = running_job(k8s_cluster, project, owner)
    k8s_cluster.kubelet.log(NS, pod, *(f"line {i}" for i in range(300)))
    errors: list[BaseException] = []

    def collect() -> None:
        try:
            for _ in range(5):
                logs.collect_logs(job_id=job.pk, limit=50)
        except BaseException as exc:
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=collect) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    while logs.collect_logs(job_id=job.pk, limit=50)[0]:
        pass
    assert stored(job) == [f"line {i}" for i in range(300)]


def test_more_than_a_read_within_one_second_is_skipped_visibly_not_stalled(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    job, pod = running_job(k8s_cluster, project, owner)
    second = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    line = "x" * 1000
    burst = MAX_BYTES // 1000 + 500  # more than one read holds, all printed in one second
    k8s_cluster.kubelet.log(NS, pod, *([line] * burst), at=second)
    k8s_cluster.kubelet.log(NS, pod, "next second", at=second.replace(second=1))
    for _ in range(5):
        logs.collect_logs(job_id=job.pk)
    lines = stored(job)
    assert lines[-1] == "next second"
    note = lines[-2]
    assert note.startswith("[ajuste] at least ") and "bytes of log skipped at 2030-01-01" in note
    kept = lines[:-2]
    assert kept and set(kept) == {line} and len(kept) < burst


def test_a_line_longer_than_a_read_is_skipped_visibly(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    job, pod = running_job(k8s_cluster, project, owner)
    second = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    k8s_cluster.kubelet.log(NS, pod, "before", at=second)
    k8s_cluster.kubelet.log(NS, pod, "y" * (MAX_BYTES + 10), at=second.replace(second=5))
    k8s_cluster.kubelet.log(NS, pod, "after", at=second.replace(second=6))
    for _ in range(5):
        logs.collect_logs(job_id=job.pk)
    lines = stored(job)
    assert lines[0] == "before" and lines[-1] == "after" and len(lines) == 3
    assert "bytes of log skipped at 2030-01-01 12:00:05 UTC" in lines[1]


class EndlessBackend:
    """A log that never reaches its end."""

    def read_logs(self, *, ref: Any, cursor: str | None, limit: int = 1000, **_: Any) -> LogChunk:
        count = int(cursor or 0) + 1
        return LogChunk(lines=(f"line {count}",), cursor=str(count), eof=False)


def test_an_archive_that_stops_before_the_end_says_truncated(project: Project, owner: Any) -> None:
    flavor = Flavor.objects.get(name="ai1-1-cpu")
    job = Job.objects.create(
        project=project, owner=owner, name="j", image="x/y:1", flavor=flavor, state=JobState.DONE
    )
    Job.objects.filter(pk=job.pk).update(launched_run=1)
    job_backend.set_backend(EndlessBackend())  # type: ignore[arg-type]
    try:
        assert logs.archive_logs(job_id=job.pk, max_rounds=3)
    finally:
        job_backend.set_backend(None)
    job.refresh_from_db()
    assert job.logs_archived and job.log_lines == 4
    assert stored(job) == [
        "line 1",
        "line 2",
        "line 3",
        "[ajuste] log truncated: the archive stopped before the end of the log",
    ]


def test_a_followed_log_is_read_every_round_however_quiet(
    k8s_jobs: Any, project: Project, owner: Any, owner_client: Client
) -> None:
    """A quiet log is read less and less often, but not while a page or `ajuste logs -f`
    follows it: a line printed after a pause reaches the reader within a round, not after the
    back-off. Many readers make no more reads than one (the rounds are the collector's)."""
    job = submit(project, owner)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, launched_run=job.run)
    reads: list[str] = []

    def quiet(job_id: str) -> int:
        reads.append(job_id)
        return 0

    collector = LogCollector(interval_s=60, idle_s=600, collect=quiet)  # rounds by hand
    assert collector.tick() == [str(job.pk)]
    assert collector.tick() == []  # quiet: not due again for a while
    for _ in range(5):  # five viewers of the page
        response = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/?after=0", HTTP_HX_REQUEST="true")
        assert response.status_code == 200
    assert collector.tick() == [str(job.pk)]
    assert collector.tick() == [str(job.pk)]  # followed: every round, still once per round
    assert reads == [str(job.pk)] * 3


def test_a_log_followed_through_the_api_is_read_every_round(
    k8s_jobs: Any, project: Project, owner: Any, owner_api: APIClient
) -> None:
    job = submit(project, owner)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, launched_run=job.run)
    collector = LogCollector(interval_s=60, idle_s=600, collect=lambda job_id: 0)
    assert collector.tick() == [str(job.pk)]
    assert collector.tick() == []
    assert owner_api.get(f"/api/v1/jobs/{job.pk}/logs/?project=alpha").status_code == 200
    assert collector.tick() == [str(job.pk)]


def test_a_followed_log_whose_read_fails_waits_the_longest(
    k8s_jobs: Any, project: Project, owner: Any
) -> None:
    job = submit(project, owner)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, launched_run=job.run)
    collector = LogCollector(interval_s=60, idle_s=600, collect=lambda job_id: -1)
    assert collector.tick() == [str(job.pk)]
    note_followed(job.pk)
    assert collector.tick() == []  # a failing read is not retried every round


def test_a_read_with_nothing_new_writes_no_row(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any
) -> None:
    """Most reads of a running job's log find nothing new: they write nothing (before, each
    rewrote the row, its loss curve with it: 30.5 KB of WAL with a 2,000-point curve)."""
    job, pod = running_job(k8s_cluster, project, owner)
    k8s_cluster.kubelet.log(NS, pod, "step 1 loss 2.0")
    assert logs.collect_logs(job_id=job.pk)[0] == 1
    written = Job.objects.get(pk=job.pk).updated_at
    with CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            assert logs.collect_logs(job_id=job.pk)[0] == 0
    writes = [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert writes == []
    assert Job.objects.get(pk=job.pk).updated_at == written
    k8s_cluster.kubelet.log(NS, pod, "step 2 loss 1.5")  # a new line is still stored
    assert logs.collect_logs(job_id=job.pk)[0] == 1
    assert stored(job) == ["step 1 loss 2.0", "step 2 loss 1.5"]
