"""The GPU idle policy (issue 31) on the emulated cluster, with a Prometheus stand-in on
loopback serving DCGM series and a frozen clock that the test moves a minute per check: a
notebook whose GPU sits at 0 % is warned, then stopped the policy's minutes and grace after its
last busy sample, with the reason, its workspace kept; a job at the threshold for the whole
window is never stopped (one just below it is, as its project chose); no data never stops
anything."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core import mail

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.models import Workload
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.jobs.states import JobState
from controlpanel.notebooks.services import notebook_create
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from controlpanel.reclaim.models import GpuIdleNotice, GpuIdleWatch
from controlpanel.reclaim.tasks import gpu_idle_check_task, gpu_idle_notify
from deploy import names
from tests.fixtures.clock import FrozenClock
from tests.fixtures.jobs import access_for, submit
from tests.fixtures.prometheus import PrometheusStandIn

pytestmark = [pytest.mark.k8s, pytest.mark.django_db(transaction=True)]
NS = "ajuste-alpha"
N, S = NotebookState, JobState
MINUTE = timedelta(minutes=1)


def policy(project: Project, **values: Any) -> Project:
    fields = {"gpu_idle_percent": 10, "gpu_idle_minutes": 10, "gpu_idle_grace_minutes": 5}
    for name, value in (fields | values).items():
        setattr(project, name, value)
    project.save()
    return project


def gpu_notebook(k8s_cluster: Any, project: Project, owner: Any, name: str = "gpu") -> Workload:
    data = {"name": name, "flavor": "h100-1-gpu", "image": "pytorch"}
    notebook = notebook_create(access=access_for(project), user=owner, data=data)
    admit_jobs(project_id=project.pk)
    reconcile(str(notebook.pk))
    k8s_cluster.kubelet.run(NS, f"nb-{notebook.pk}-0")
    sweep()
    notebook.refresh_from_db()
    assert notebook.state == N.RUNNING, notebook.state_reason
    return notebook


def gpu_job(k8s_cluster: Any, project: Project, owner: Any, name: str) -> Workload:
    job = submit(project, owner, name=name)
    admit_jobs(project_id=project.pk)
    reconcile(str(job.pk))
    k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, names.job_name(job_ref(job))))
    sweep()
    job.refresh_from_db()
    assert job.state == S.RUNNING, job.state_reason
    return job


def minutes_from(start: datetime, values: Iterable[float]) -> list[tuple[datetime, float]]:
    """One sample a minute from `start`."""
    return [(start + MINUTE * n, value) for n, value in enumerate(values)]


def check_every_minute(clock: FrozenClock, until: datetime, stop: Any = None) -> datetime | None:
    """Move the clock a minute at a time, checking after each, until `until` or `stop()`
    holds; the time it held."""
    while clock.now() < until:
        clock.advance(MINUTE)
        gpu_idle_check_task()
        if stop is not None and stop():
            return clock.now()
    return None


def test_a_notebook_at_0_percent_is_warned_then_stopped_keeping_its_workspace(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    dcgm: PrometheusStandIn,
    frozen_clock: FrozenClock,
) -> None:
    policy(project, gpu_idle_minutes=10, gpu_idle_grace_minutes=5)
    notebook = gpu_notebook(k8s_cluster, project, owner)
    t0 = notebook.started_at.replace(microsecond=0) + timedelta(seconds=1)
    frozen_clock.instant = t0
    dcgm.gpu(namespace=NS, pod=f"nb-{notebook.pk}-0", samples=minutes_from(t0, [85] * 4 + [0] * 60))
    busy_until = t0 + 3 * MINUTE  # the last busy sample

    def stopping() -> bool:
        return Workload.objects.get(pk=notebook.pk).stop_requested

    warned_by = check_every_minute(
        frozen_clock, t0 + 30 * MINUTE, lambda: GpuIdleNotice.objects.exists()
    )
    assert warned_by == busy_until + 10 * MINUTE  # idle for the policy's minutes
    watch = GpuIdleWatch.objects.get(pk=notebook.pk)
    assert (watch.idle_since, watch.act_at) == (busy_until, busy_until + 15 * MINUTE)
    assert Workload.objects.get(pk=notebook.pk).state == N.RUNNING
    [warning] = GpuIdleNotice.objects.all()
    stop_at = f"{busy_until + 15 * MINUTE:%H:%M}"
    assert warning.text == (
        f"Notebook gpu: its GPUs have been below 10 % utilisation for 10 min. "
        f"It will be stopped at {stop_at} UTC unless they work again (the project's idle policy)."
    )

    stopped_at = check_every_minute(frozen_clock, t0 + 60 * MINUTE, stopping)
    assert stopped_at == busy_until + 15 * MINUTE  # minutes + grace of the last busy sample
    notebook.refresh_from_db()
    assert notebook.state == N.STOPPING
    assert notebook.state_reason == (
        "GPU idle for 15 min: below 10 % utilisation (the project's idle policy)"
    )
    reconcile(str(notebook.pk))  # what the stop enqueued: replicas 0
    k8s_cluster.reconcile()  # its pod stops
    sweep()
    notebook.refresh_from_db()
    assert notebook.state == N.STOPPED
    assert notebook.state_reason.startswith("GPU idle for 15 min")  # not "the user's request"
    set_ = k8s_cluster.get("statefulsets", NS, f"nb-{notebook.pk}")
    assert set_["spec"]["replicas"] == 0
    assert k8s_cluster.get("persistentvolumeclaims", NS, f"workspace-nb-{notebook.pk}-0")

    for notice in GpuIdleNotice.objects.order_by("pk"):
        gpu_idle_notify(notice.pk)
    assert [m.to for m in mail.outbox] == [[owner.email], [owner.email]]
    assert "will be stopped" in mail.outbox[0].body and "was stopped" in mail.outbox[1].body
    assert f"/p/alpha/notebooks/{notebook.pk}/" in mail.outbox[1].body
    assert not GpuIdleNotice.objects.filter(notified_at=None).exists()


def test_a_job_at_the_threshold_is_never_stopped_one_below_is_as_its_project_chose(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    dcgm: PrometheusStandIn,
    frozen_clock: FrozenClock,
) -> None:
    policy(project, gpu_idle_percent=30, gpu_idle_minutes=10, gpu_idle_grace_minutes=5)
    project.gpu_idle_jobs = "stop"
    project.save()
    working = gpu_job(k8s_cluster, project, owner, "working")
    idle = gpu_job(k8s_cluster, project, owner, "idle")
    t0 = max(working.started_at, idle.started_at).replace(microsecond=0) + timedelta(seconds=1)
    frozen_clock.instant = t0
    # The working job's busiest GPU is never below 30 %; both of the idle one's sit at 29 %.
    for job, first, second in (
        (working, [30, 95] * 60, [30] * 120),
        (idle, [29] * 120, [29] * 120),
    ):
        pod = f"job-{job.pk}-r1-x7k2p"
        dcgm.gpu(namespace=NS, pod=pod, gpu="0", samples=minutes_from(t0, first))
        dcgm.gpu(namespace=NS, pod=pod, gpu="1", samples=minutes_from(t0, second))

    check_every_minute(frozen_clock, t0 + 90 * MINUTE)

    working.refresh_from_db()
    assert working.state == S.RUNNING and not working.stop_requested
    assert GpuIdleWatch.objects.get(pk=working.pk).idle_since is None
    idle.refresh_from_db()
    assert idle.state == S.INTERRUPTING, idle.state_reason
    assert idle.state_reason.startswith("GPU idle for 15 min: below 30 % utilisation")
    events = list(GpuIdleNotice.objects.values_list("workload_id", "event"))
    assert events == [(idle.pk, "warning"), (idle.pk, "acted")]


def test_jobs_are_warned_only_when_the_project_says_so(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    dcgm: PrometheusStandIn,
    frozen_clock: FrozenClock,
) -> None:
    policy(project)  # gpu_idle_jobs: "warn", the default
    job = gpu_job(k8s_cluster, project, owner, "quiet")
    t0 = job.started_at.replace(microsecond=0) + timedelta(seconds=1)
    frozen_clock.instant = t0
    dcgm.gpu(namespace=NS, pod=f"job-{job.pk}-r1-abcde", samples=minutes_from(t0, [0] * 200))
    check_every_minute(frozen_clock, t0 + 120 * MINUTE)
    job.refresh_from_db()
    assert job.state == S.RUNNING and not job.stop_requested
    [notice] = GpuIdleNotice.objects.all()
    assert notice.text.endswith("The project's idle policy warns only: stop it if it is done.")
    assert GpuIdleWatch.objects.get(pk=job.pk).action == "warn"


def test_no_data_never_stops_anything(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    dcgm: PrometheusStandIn,
    frozen_clock: FrozenClock,
) -> None:
    """No series for its pod, samples that stop arriving, a Prometheus that is down: the
    notebook runs on, and its page says why nothing is judged."""
    policy(project, gpu_idle_minutes=10, gpu_idle_grace_minutes=0)
    notebook = gpu_notebook(k8s_cluster, project, owner)
    t0 = notebook.started_at.replace(microsecond=0) + timedelta(seconds=1)
    frozen_clock.instant = t0

    check_every_minute(frozen_clock, t0 + 60 * MINUTE)  # no series for its pod
    watch = GpuIdleWatch.objects.get(pk=notebook.pk)
    assert watch.problem == "no utilisation sample yet (no data is not idle)"

    # Idle samples for 8 minutes, then none (its exporter lost): never idle long enough.
    start = frozen_clock.now()
    lost = start + 9 * MINUTE
    pod = f"nb-{notebook.pk}-0"
    dcgm.gpu(namespace=NS, pod=pod, samples=minutes_from(start, [0] * 9), stale_from=lost)
    check_every_minute(frozen_clock, start + 60 * MINUTE)
    watch.refresh_from_db()
    assert watch.problem == "no utilisation sample for 52 min (no data is not idle)"
    assert watch.warned_at is None and watch.idle_since is None

    dcgm.down = True
    dcgm.gpu(namespace=NS, pod=f"nb-{notebook.pk}-0", samples=minutes_from(start, [0] * 300))
    check_every_minute(frozen_clock, start + 180 * MINUTE)
    watch.refresh_from_db()
    assert watch.problem == "Prometheus answered HTTP 503: down"
    notebook.refresh_from_db()
    assert notebook.state == N.RUNNING and not notebook.stop_requested
    assert not GpuIdleNotice.objects.exists()
