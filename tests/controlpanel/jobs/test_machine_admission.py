"""On the local backend every project shares one machine: admission keeps the admitted jobs'
vCPU and memory within the machine's, first in, first out across projects (issue #12: 19 CPU
fine-tunes on 2 cores ran 10 at a time)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlpanel.engine import admission
from controlpanel.engine import backend as job_backend
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.selectors import queue_position
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy.local import LocalBackend
from deploy.local.gpus import Gpu
from deploy.types import Capacity
from tests.fixtures.jobs import project_bucket, put_dataset, submit
from tests.fixtures.panel import add_member


def machine(tmp_path: Path, *, cpus: int, memory_gib: int) -> LocalBackend:
    backend = LocalBackend(base_dir=tmp_path / "workloads", cpus=cpus, memory_gib=memory_gib)
    job_backend.set_backend(backend)
    return backend


@pytest.fixture
def two_cores(tmp_path: Path) -> Iterator[LocalBackend]:
    """The machine of the issue: 2 vCPU (and memory enough for every job here)."""
    yield machine(tmp_path, cpus=2, memory_gib=64)
    job_backend.set_backend(None)


@pytest.fixture
def beta_owner(other_project: Project, owner: Any) -> Any:
    from controlpanel.projects.models import Role

    add_member(other_project, owner, Role.MANAGER)
    return owner


@pytest.fixture(autouse=True)
def _buckets(project: Project, other_project: Project, panel_s3: Any) -> None:
    for p in (project, other_project):
        BUCKETS[p.pk] = project_bucket(p, panel_s3).name
        put_dataset(panel_s3, BUCKETS[p.pk])


BUCKETS: dict[int, str] = {}


def cpu_job(project: Project, owner: Any, units: int = 1) -> Job:
    """A fine-tune on `units` × ai1-1-cpu (1 vCPU, 4 GiB each), as the issue's were (its rw
    output adds a push sidecar's request in a pod, none on this machine)."""
    bucket = BUCKETS[project.pk]
    return submit(
        project,
        owner,
        preset="finetune",
        image="",
        command=[],
        flavor="ai1-1-cpu",
        gpu=units,
        params={"max_steps": 1},
        volumes=[
            f"{bucket}@LOCAL/tiny-llama:/workspace/model",
            f"{bucket}@LOCAL/chat:/workspace/data",
            f"{bucket}@LOCAL/out:/workspace/output:rw",
        ],
    )


def reasons(*jobs: Job) -> list[str]:
    return [Job.objects.get(pk=job.pk).state_reason for job in jobs]


def finish(job: Job) -> None:
    Job.objects.filter(pk=job.pk).update(state=JobState.DONE)


def test_local_capacity_is_the_machine_or_the_override(tmp_path: Path) -> None:
    assert LocalBackend(base_dir=tmp_path, cpus=3, memory_gib=5, gpus=list).capacity() == (
        Capacity(millicpu=3000, memory_mib=5 * 1024)
    )
    mem_total_kib = int(Path("/proc/meminfo").read_text().split("\n")[0].split()[1])
    assert LocalBackend(base_dir=tmp_path, gpus=list).capacity() == Capacity(
        millicpu=len(os.sched_getaffinity(0)) * 1000, memory_mib=mem_total_kib // 1024
    )
    # and its GPUs, by name (issue 32: the panel refuses a GPU flavor it has none of)
    two = [Gpu(0, "NVIDIA L4"), Gpu(1, "NVIDIA L4")]
    assert LocalBackend(base_dir=tmp_path, gpus=lambda: two).capacity().gpus == ("NVIDIA L4",) * 2


def test_the_settings_size_the_panels_local_backend(settings: Any, tmp_path: Path) -> None:
    settings.COMPUTE_BACKEND, settings.VAR_DIR = "local", tmp_path
    settings.AJUSTE_LOCAL_CPUS, settings.AJUSTE_LOCAL_MEMORY_GIB = 2, 6
    job_backend.set_backend(None)
    try:
        capacity = job_backend.get_backend().capacity()
        assert (capacity.millicpu, capacity.memory_mib) == (2000, 6144)  # GPUs: the host's
    finally:
        job_backend.set_backend(None)


def test_the_cluster_has_no_machine_capacity(k8s_backend: Any) -> None:
    assert k8s_backend.capacity() is None


def test_jobs_of_all_projects_share_the_machine_first_in_first_out(
    two_cores: Any, project: Project, other_project: Project, beta_owner: Any
) -> None:
    a1 = cpu_job(project, beta_owner)
    b1 = cpu_job(other_project, beta_owner)
    a2 = cpu_job(project, beta_owner)
    b2 = cpu_job(other_project, beta_owner)
    a3 = cpu_job(project, beta_owner)
    assert admit_jobs(project_id=project.pk) == [str(a1.pk), str(b1.pk)]
    assert reasons(a2, b2, a3) == [
        f"waiting: this machine has 2 vCPU, 2 in use by job {a1.name} (1), job {b1.name} of "
        f"project {other_project.slug} (1); this job needs 1; position 1 in the queue",
        "waiting behind earlier jobs for this machine's vCPU; position 2 in the queue",
        "waiting behind earlier jobs for this machine's vCPU; position 3 in the queue",
    ]
    for job, position in ((a2, 1), (b2, 2), (a3, 3)):
        job.refresh_from_db()
        assert (job.state, queue_position(job=job)) == (JobState.QUEUED, position)
    assert admit_jobs(project_id=other_project.pk) == []  # the other project's admit too

    # A job of alpha ends: the next in line, beta's, starts (alpha's own admit runs it).
    finish(a1)
    assert admit_jobs(project_id=project.pk) == [str(a2.pk)]
    finish(b1)
    assert admit_jobs(project_id=project.pk) == [str(b2.pk)]
    a3.refresh_from_db()
    assert queue_position(job=a3) == 1
    assert reasons(a3) == [  # named from alpha's side: beta's job says its project
        f"waiting: this machine has 2 vCPU, 2 in use by job {a2.name} (1), job {b2.name} of "
        f"project {other_project.slug} (1); this job needs 1; position 1 in the queue"
    ]


def test_a_job_bigger_than_the_machine_says_it_can_never_start(
    two_cores: Any, project: Project, owner: Any
) -> None:
    big = cpu_job(project, owner, units=3)
    small = cpu_job(project, owner)
    assert admit_jobs(project_id=project.pk) == [str(small.pk)]  # the big one blocks nothing
    assert reasons(big) == [
        "this job needs 3 vCPU, more than this machine's 2: it can never start here "
        "(AJUSTE_LOCAL_CPUS and AJUSTE_LOCAL_MEMORY_GIB set what the local backend may use); "
        "position 1 in the queue"
    ]


def test_memory_is_counted_too(tmp_path: Path, project: Project, owner: Any) -> None:
    machine(tmp_path, cpus=8, memory_gib=6)
    try:
        first, second = cpu_job(project, owner), cpu_job(project, owner)
        assert admit_jobs(project_id=project.pk) == [str(first.pk)]
        assert reasons(second) == [
            f"waiting: this machine has 6 GiB of memory, 4 in use by job {first.name} (4); "
            "this job needs 4; position 1 in the queue"
        ]
    finally:
        job_backend.set_backend(None)


def test_project_quotas_still_hold_on_the_machine(
    two_cores: Any, project: Project, other_project: Project, beta_owner: Any
) -> None:
    """alpha may use 2 vCPU (a job asks 1.25 of a quota: its pod's push sidecar counts there):
    its second job waits for the quota, beta's job passes it."""
    project.cpu_quota = 2
    project.save()
    a1, a2 = cpu_job(project, beta_owner), cpu_job(project, beta_owner)
    b1 = cpu_job(other_project, beta_owner)
    assert admit_jobs(project_id=project.pk) == [str(a1.pk), str(b1.pk)]
    assert reasons(a2) == [
        "waiting: project CPU quota 2 vCPU, 1.25 in use, this job needs 1.25; "
        "position 1 in the queue"
    ]


def test_the_kubernetes_backend_keeps_per_project_admission(
    k8s_jobs: Any, project: Project, other_project: Project, beta_owner: Any
) -> None:
    """A cluster queues by itself: many jobs of two projects are all admitted."""
    jobs = [submit(p, beta_owner, flavor="ai1-1-cpu") for p in (project, other_project) * 3]
    assert len(admit_jobs(project_id=project.pk)) == 3
    assert len(admit_jobs(project_id=other_project.pk)) == 3
    assert all(queue_position(job=Job.objects.get(pk=j.pk)) is None for j in jobs)


def test_a_page_tells_the_position_without_building_a_backend(
    settings: Any, project: Project, other_project: Project, beta_owner: Any, monkeypatch: Any
) -> None:
    """The web process has no cluster identity: the position comes from rows and settings."""

    def refuse() -> Any:
        raise AssertionError("the web process built a compute backend")

    job_backend.set_backend(None)
    monkeypatch.setattr(job_backend, "_build_backend", refuse)
    flavor = Flavor.objects.get(name="ai1-1-cpu")
    jobs = [
        Job.objects.create(project=p, owner=beta_owner, name="j", image="x/y:1", flavor=flavor)
        for p in (project, other_project, project)
    ]
    settings.COMPUTE_BACKEND = "kubernetes"
    assert [queue_position(job=j) for j in jobs] == [1, 1, 2]  # each project its own queue
    settings.COMPUTE_BACKEND = "local"
    assert [queue_position(job=j) for j in jobs] == [1, 2, 3]  # one machine, one queue


@pytest.mark.django_db(transaction=True)
def test_two_workers_admitting_at_once_never_exceed_the_machine(
    two_cores: Any, project: Project, other_project: Project, beta_owner: Any, monkeypatch: Any
) -> None:
    """Both workers read the queue before either admits. Without one machine-wide lock taken
    first, the second works from a stale queue: it tells the jobs the first one admitted that
    they wait."""
    jobs = [cpu_job(p, beta_owner) for p in (project, other_project) * 2]
    arrived = threading.Barrier(2)
    real_waiting = admission.machine_waiting_jobs

    def waiting_once_the_other_has_read() -> list[Job]:
        waiting = real_waiting()
        # With the lock the other worker is not here yet: this one goes on after 3 s alone.
        with contextlib.suppress(threading.BrokenBarrierError):
            arrived.wait(timeout=3)
        return waiting

    monkeypatch.setattr(admission, "machine_waiting_jobs", waiting_once_the_other_has_read)
    admitted: list[str] = []
    errors: list[BaseException] = []

    def worker(project_id: int) -> None:
        from django.db import connection

        try:
            admitted.extend(admit_jobs(project_id=project_id))
        except BaseException as exc:  # told below, from the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(p.pk,)) for p in (project, other_project)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(admitted) == sorted(str(j.pk) for j in jobs[:2])
    assert Job.objects.exclude(admitted_at=None).count() == 2
    assert [r.split(";")[-1] for r in reasons(*jobs)] == [
        "admitted: starting",
        "admitted: starting",
        " position 1 in the queue",
        " position 2 in the queue",
    ]
