"""At most one admission queued per project (issue #12): a burst of submits used to queue
one `project_admit` each, and each pass reads and records every waiting job (quadratic in
the burst). The task clears its mark as it starts, before it reads the waiting jobs, so a
submit committed after that read queues the next pass and no job is left waiting."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection

from controlpanel.engine import admission, tasks
from controlpanel.engine.backend import job_ref
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from deploy.names import job_name
from tests.fixtures.jobs import submit
from tests.fixtures.processes import Processes, wait_for

pytestmark = pytest.mark.k8s


@pytest.fixture
def admissions(monkeypatch: pytest.MonkeyPatch, project: Project) -> list[int]:
    """The project_admit messages sent (not run); the reconciles they send are dropped."""
    cache.delete(tasks._admit_key(project.pk))
    sent: list[int] = []
    monkeypatch.setattr(tasks.project_admit, "delay", sent.append)
    monkeypatch.setattr(tasks.job_reconcile, "delay", lambda job_id: None)
    return sent


def submitted(project: Project, owner: Any, capture: Any, name: str) -> Job:
    """A submit as the web runs it: its transaction commits, then what it queued is sent."""
    with capture(execute=True):
        return submit(project, owner, name=name)


def test_a_burst_of_submits_queues_one_admission_that_admits_them_all(
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    admissions: list[int],
    django_capture_on_commit_callbacks: Any,
) -> None:
    jobs = [
        submitted(project, owner, django_capture_on_commit_callbacks, f"j{i}") for i in range(5)
    ]
    assert admissions == [project.pk]
    tasks.project_admit(project.pk)
    assert Job.objects.filter(pk__in=[j.pk for j in jobs], admitted_at=None).count() == 0
    # Its pass is over: the next submit queues the next one.
    late = submitted(project, owner, django_capture_on_commit_callbacks, "late")
    assert admissions == [project.pk, project.pk]
    tasks.project_admit(project.pk)
    late.refresh_from_db()
    assert late.admitted_at is not None


def test_a_submit_committed_while_a_pass_runs_queues_another(
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    admissions: list[int],
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = submitted(project, owner, django_capture_on_commit_callbacks, "first")
    assert admissions == [project.pk]
    admit_jobs = tasks.admit_jobs
    during: list[Job] = []

    def admit_then_a_submit_commits(*, project_id: int) -> list[str]:
        admitted = admit_jobs(project_id=project_id)  # the waiting jobs were read
        during.append(submitted(project, owner, django_capture_on_commit_callbacks, "during"))
        return admitted

    monkeypatch.setattr(tasks, "admit_jobs", admit_then_a_submit_commits)
    tasks.project_admit(project.pk)
    assert admissions == [project.pk, project.pk]  # the pass had not seen it: one more
    monkeypatch.setattr(tasks, "admit_jobs", admit_jobs)
    tasks.project_admit(project.pk)
    for job in (first, *during):
        job.refresh_from_db()
        assert job.admitted_at is not None


def test_an_admission_that_could_not_be_sent_does_not_hold_the_next(
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    admissions: list[int],
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broker_down(project_id: int) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.project_admit, "delay", broker_down)
    # The submit still succeeds (its row is committed; the sweep admits what waits)...
    submitted(project, owner, django_capture_on_commit_callbacks, "lost")
    # ...and the failed send leaves no mark that would hold the next one.
    monkeypatch.setattr(tasks.project_admit, "delay", admissions.append)
    submitted(project, owner, django_capture_on_commit_callbacks, "next")
    assert admissions == [project.pk]


@pytest.mark.django_db(transaction=True)
def test_a_submit_does_not_wait_for_an_admission_pass(
    k8s_jobs: Any, project: Project, owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass holds its project's row locked till it commits; a submit inserts a row that
    references the project. FOR UPDATE made that insert wait for the pass (every submit of a
    burst queued behind the pass admitting the ones before it); FOR NO KEY UPDATE does not."""
    locked, done = threading.Event(), threading.Event()
    admit = admission._admit

    def held(*args: Any) -> list[str]:
        locked.set()
        done.wait(30)
        return admit(*args)

    monkeypatch.setattr(admission, "_admit", held)
    monkeypatch.setattr(tasks.project_admit, "delay", lambda project_id: None)

    def run_pass() -> None:
        try:
            admission.admit_jobs(project_id=project.pk)
        finally:
            connection.close()

    passing = threading.Thread(target=run_pass)
    passing.start()
    try:
        assert locked.wait(30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # a wait fails the submit at once
        job = submit(project, owner, name="during")
    finally:
        done.set()
        passing.join(30)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert Job.objects.filter(pk=job.pk).exists()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_real_worker_one_message_for_a_burst_and_every_job_admitted(
    processes: Any,
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    panel_s3: Any,
) -> None:
    procs: Processes = processes(
        {
            "COMPUTE_BACKEND": "kubernetes",
            "KUBECONFIG": k8s_cluster.kubeconfig,  # its server and bearer token
            "S3_ENDPOINT_URL": panel_s3.endpoint_url,
            "S3_ACCESS_KEY": panel_s3.access_key,
            "S3_SECRET_KEY": panel_s3.secret_key,
            "S3_ALIAS": "LOCAL",
        }
    )
    project.gpu_quota, project.cpu_quota, project.memory_gib_quota, project.pod_quota = 100, 0, 0, 0
    project.save()  # room for every job: none waits for a quota here
    # No worker yet: ten submits, one message.
    before = [submit(project, owner, name=f"before-{i}") for i in range(10)]
    procs.worker(concurrency=4)

    def admitted(jobs: list[Job]) -> bool:
        return not Job.objects.filter(pk__in=[j.pk for j in jobs], admitted_at=None).exists()

    wait_for(lambda: admitted(before), 60, "the first ten admitted", procs)
    assert len(re.findall(r"project_admit\[[^]]+\] received", procs.logs())) == 1

    # With the worker running, from 4 threads at once: however the submits and the passes
    # interleave, none is left waiting.
    def one(i: int) -> Job:
        try:
            return submit(project, owner, name=f"burst-{i}")
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        burst = list(pool.map(one, range(24)))
    wait_for(lambda: admitted(burst), 60, "the burst admitted", procs)
    wait_for(
        lambda: all(k8s_cluster.pods_of(project.namespace, job_name(job_ref(j))) for j in burst),
        60,
        "every pod",
        procs,
    )
