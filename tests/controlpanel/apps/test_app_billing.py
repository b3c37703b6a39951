"""Apps bill RUNNING replica-minutes (#16): each replica is a run of its own in the ledger,
opened when its server starts and closed when it goes (scaled down, replaced by a rolling
update, stopped), so three replicas for ten minutes bill thirty. Observations are applied
again, late and out of order without billing a minute twice; scaled to zero bills nothing.

First at the level of observations (`apply_observation` → runs → ledger), then through the
whole engine on the emulated cluster (the sweep observing a Deployment scaled 1 → 3 → 1 by
its autoscaler, then restarted by a rolling update, then stopped), each checked against a
replica-minute count computed from the timeline alone. One clock drives the panel and the
cluster, moved by the test, so every interval is exact."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest

from controlpanel.billing.models import Line
from controlpanel.buckets.models import Bucket
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.lifecycle import apply_observation
from controlpanel.engine.logs import collect_logs
from controlpanel.engine.models import JobRun, Kind, Workload
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.sweep import record_observation
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.services import app_create, app_delete, app_stop
from controlpanel.served.states import AppState
from deploy.kubernetes.observe_app import replica_run
from deploy.local import runs as local_runs
from deploy.types import ObservedWorkload, Phase, ReplicaRun, WorkloadKind, WorkloadRef
from tests.fixtures.jobs import access_for

A = AppState
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
RATE = Decimal("0.0400")  # ai1-1-cpu's default price per hour


class Clock:
    """The one time both the panel (`timezone.now`) and the emulated cluster read."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def to(self, minutes: int) -> datetime:
        self.at = T0 + timedelta(minutes=minutes)
        return self.at


@pytest.fixture
def clock() -> Iterator[Clock]:
    clock = Clock(T0)
    with mock.patch("django.utils.timezone.now", clock):
        yield clock


def replica_minutes(timeline: list[tuple[int, int]], end: int) -> int:
    """Σ replicas × minutes over (minute, replicas from then on) steps, up to `end`."""
    bounds = [minute for minute, _ in timeline[1:]] + [end]
    return sum(count * (until - at) for (at, count), until in zip(timeline, bounds, strict=True))


def billed(app: Workload) -> dict[str, int]:
    """The ledger's minutes of each of the app's runs, by run uid."""
    minutes: dict[str, int] = {}
    for line in Line.objects.filter(run__job=app).select_related("run"):
        assert line.price_per_hour == RATE and line.units == 1
        minutes[line.run.uid] = minutes.get(line.run.uid, 0) + line.minutes
    return minutes


def open_uids(app: Workload) -> set[str]:
    return set(JobRun.objects.filter(job=app, finished_at=None).values_list("uid", flat=True))


# 1. Observations → runs → ledger


@pytest.fixture
def app(project: Project, owner: Any, clock: Clock) -> Workload:
    return Workload.objects.create(
        kind=Kind.APP,
        project=project,
        owner=owner,
        name="bot",
        image="serving:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        gpu=1,
        state=A.INITIALIZING,
        admitted_at=T0,
        launched_run=1,
    )


def seen(app: Workload, *replicas: tuple[str, int], wanted: int | None = None) -> ObservedWorkload:
    """A RUNNING observation of the app with these (uid, minute its server started)."""
    runs = tuple(ReplicaRun(uid=uid, started_at=T0 + timedelta(minutes=m)) for uid, m in replicas)
    count = len(runs)
    return ObservedWorkload(
        kind=WorkloadKind.APP,
        id=str(app.pk),
        phase=Phase.RUNNING,
        reason="ready" if runs else "scaled to zero",
        replicas=(count, count if wanted is None else wanted),
        run_uid=runs[0].uid if runs else None,
        started_at=runs[0].started_at if runs else None,
        replica_runs=runs,
    )


def observe(app: Workload, observed: ObservedWorkload) -> None:
    app.refresh_from_db()
    apply_observation(app, observed)


def test_each_replica_is_a_run_and_is_billed_once(app: Workload, clock: Clock) -> None:
    observe(app, seen(app, ("a", 0)))
    assert app.state == A.RUNNING and open_uids(app) == {"a"}

    clock.to(10)  # scaled to three
    three = seen(app, ("a", 0), ("b", 10), ("c", 10))
    for _ in range(3):  # the watch, the sweep and a retried task see the same
        observe(app, three)
    assert open_uids(app) == {"a", "b", "c"}
    assert JobRun.objects.filter(job=app).count() == 3

    clock.to(20)  # back to one: b and c end as the panel sees them gone
    observe(app, seen(app, ("a", 0)))
    assert open_uids(app) == {"a"}
    clock.to(21)
    observe(app, three)  # a listing older than the scale-down, applied late
    assert open_uids(app) == {"a"}, "an ended replica is never opened again"
    assert JobRun.objects.get(uid="b").finished_at == T0 + timedelta(minutes=20)

    clock.to(30)  # a rolling update: d serves, then a goes
    observe(app, seen(app, ("a", 0), ("d", 30)))
    clock.to(31)
    observe(app, seen(app, ("d", 30)))
    assert open_uids(app) == {"d"}

    clock.to(40)  # scaled to zero: nothing runs, nothing is billed
    observe(app, seen(app))
    assert (app.state, app.state_reason) == (A.RUNNING, "scaled to zero")
    assert open_uids(app) == set()
    clock.to(55)
    observe(app, seen(app))

    timeline = [(0, 1), (10, 3), (20, 1), (30, 2), (31, 1), (40, 0)]
    assert sum(billed(app).values()) == replica_minutes(timeline, end=55) == 61
    assert billed(app) == {"a": 31, "b": 10, "c": 10, "d": 10}


def test_a_restarted_server_keeps_its_first_start_and_an_ended_pod_its_end(
    app: Workload, clock: Clock
) -> None:
    observe(app, seen(app, ("a", 0)))
    clock.to(5)
    observe(app, seen(app, ("a", 4)))  # the server crashed and came back in the same pod
    assert JobRun.objects.get(uid="a").started_at == T0
    clock.to(9)
    ended = ReplicaRun(uid="a", started_at=T0, finished_at=T0 + timedelta(minutes=7), exit_code=1)
    observe(app, replace_runs(seen(app, wanted=1), ended))
    run = JobRun.objects.get(uid="a")
    assert (run.finished_at, run.exit_code) == (T0 + timedelta(minutes=7), 1)
    assert billed(app) == {"a": 7}


def test_a_stop_ends_every_replica(app: Workload, clock: Clock) -> None:
    observe(app, seen(app, ("a", 0), ("b", 0)))
    clock.to(12)
    app.refresh_from_db()
    app.stop_requested = True
    app.save()
    stopped = ObservedWorkload(
        kind=WorkloadKind.APP, id=str(app.pk), phase=Phase.STOPPED, replica_runs=()
    )
    observe(app, stopped)
    assert app.state == A.STOPPED and open_uids(app) == set()
    assert billed(app) == {"a": 12, "b": 12}


def replace_runs(observed: ObservedWorkload, *runs: ReplicaRun) -> ObservedWorkload:
    return replace(observed, replica_runs=runs)


def pod(phase: str, main: dict[str, Any], uid: str = "u-1") -> dict[str, Any]:
    status = {"name": "main", "ready": phase == "Running", **main}
    return {
        "metadata": {"name": "app-1-x", "uid": uid},
        "spec": {"nodeName": "gpu-node-1"},
        "status": {"phase": phase, "containerStatuses": [status]},
    }


def test_what_a_pod_and_a_local_server_bill() -> None:
    start, end = "2026-03-02T10:00:00Z", "2026-03-02T10:07:00Z"
    serving = pod("Running", {"state": {"running": {"startedAt": start}}})
    assert replica_run(serving) == ReplicaRun("u-1", T0, node="gpu-node-1")
    assert (
        replica_run(pod("Pending", {"state": {"waiting": {"reason": "PodInitializing"}}})) is None
    )
    crashing = {
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "startedAt": start, "finishedAt": end}},
    }
    assert replica_run(pod("Running", crashing)) == ReplicaRun("u-1", T0, node="gpu-node-1")
    done = {"state": {"terminated": {"exitCode": 137, "startedAt": start, "finishedAt": end}}}
    assert replica_run(pod("Failed", done)) == ReplicaRun(
        "u-1", T0, T0 + timedelta(minutes=7), 137, "gpu-node-1"
    )
    evicted = pod("Failed", {"state": {"running": {"startedAt": start}}})
    assert replica_run(evicted) is None  # no end said: ended as the panel sees it gone

    ref = WorkloadRef(WorkloadKind.APP, "alpha", "ajuste-alpha", "5f0c")
    state = {"phase": "RUNNING", "run_uid": "r1", "started_at": "2026-03-02T10:00:00+00:00"}
    with mock.patch.object(local_runs, "supervisor_alive", return_value=True):
        [local] = local_runs.observation(ref, state).replica_runs or ()
        assert (local.uid, local.started_at, local.finished_at) == ("r1", T0, None)
        waiting = local_runs.observation(ref, {"phase": "INITIALIZING", "run_uid": "r2"})
        assert waiting.replica_runs == ()
        job = replace(ref, kind=WorkloadKind.JOB)
        assert local_runs.observation(job, state).replica_runs is None


# 2. The engine on the emulated cluster

NS = "ajuste-alpha"


def pod_names(cluster: Any, app: App) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods_of_deployment(NS, f"app-{app.pk}")}


def run_all(cluster: Any, app: App) -> None:
    """The kubelet runs every pod and the servers answer, until the rollout settles."""
    for _ in range(10):
        waiting = [
            p["metadata"]["name"]
            for p in cluster.pods_of_deployment(NS, f"app-{app.pk}")
            if p["status"].get("phase") != "Running"
        ]
        if not waiting:
            return
        for name in waiting:
            cluster.kubelet.run(NS, name)
        cluster.reconcile()
    raise AssertionError("the rollout did not settle")


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_replicas_scaled_up_down_and_rolled_bill_their_minutes_on_the_cluster(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    data_bucket: Bucket,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(k8s_cluster.store, "now", clock)
    access = access_for(project)
    data = {
        "name": "bot",
        "flavor": "ai1-1-cpu",
        "model": f"{data_bucket.name}@LOCAL/tiny-llama",
        "model_name": "bot",
        "scaling": "cpu",
        "min_replicas": 1,
        "max_replicas": 3,
        "target_cpu": 70,
    }
    app = app_create(access=access, user=owner, data=data)
    admit_jobs(project_id=project.pk)
    reconcile(str(app.pk))
    name = f"app-{app.pk}"
    started: dict[str, datetime] = {}  # pod name → when the kubelet started its server
    ended: dict[str, datetime] = {}  # pod name → when it left the cluster
    uids: dict[str, str] = {}

    def step(minute: int, change: Any) -> None:
        """At `minute`, change the cluster, run what it made, then let the sweep look."""
        before = pod_names(k8s_cluster, app)
        clock.to(minute)
        change()
        k8s_cluster.reconcile()
        run_all(k8s_cluster, app)
        for pod in k8s_cluster.pods_of_deployment(NS, name):
            started.setdefault(pod["metadata"]["name"], clock())
            uids[pod["metadata"]["name"]] = pod["metadata"]["uid"]
        for pod in before - pod_names(k8s_cluster, app):
            ended[pod] = clock()
        sweep()
        sweep()  # seen again: nothing billed twice

    def scale(count: int) -> Any:  # what the HorizontalPodAutoscaler does
        return lambda: k8s_cluster.store.patch(
            "deployments", NS, name, {"spec": {"replicas": count}}
        )

    def restart() -> None:  # `kubectl rollout restart`: a new template, a rolling update
        stamp = {"kubectl.kubernetes.io/restartedAt": clock().isoformat()}
        patch = {"spec": {"template": {"metadata": {"annotations": stamp}}}}
        k8s_cluster.store.patch("deployments", NS, name, patch)

    step(0, lambda: None)
    app.refresh_from_db()
    assert (app.state, app.progress["replicas"]) == (A.RUNNING, [1, 1])
    k8s_cluster.kubelet.log(NS, next(iter(started)), "INFO: Uvicorn running")
    collect_logs(job_id=str(app.pk))  # the replicas the row keeps survive a log collection
    app.refresh_from_db()
    assert app.log_lines == 1 and app.progress["replicas"] == [1, 1]
    assert sweep()["changed"] == 0  # so a steady app is not observed again
    step(10, scale(3))
    app.refresh_from_db()
    assert app.progress["replicas"] == [3, 3] and len(open_uids(app)) == 3
    step(20, scale(1))
    step(30, restart)
    assert len(started) == 4 and len(ended) == 3  # the first pod was replaced
    clock.to(40)
    app = app_stop(access=access, user=owner, app=app)
    reconcile(str(app.pk))
    app.refresh_from_db()
    assert app.state == A.STOPPING  # its pod terminates, still billed
    k8s_cluster.reconcile()  # the kubelet stops it (the clock still at minute 40)
    sweep()
    app.refresh_from_db()
    assert app.state == A.STOPPED and pod_names(k8s_cluster, app) == set()
    last = set(started) - set(ended)
    ended.update(dict.fromkeys(last, clock()))

    # Every replica was a run keyed by its pod's UID, billed from its start to its end.
    expected = {
        uids[pod]: -(-int((ended[pod] - started[pod]).total_seconds()) // 60) for pod in started
    }
    assert billed(app) == expected
    assert sorted(expected.values()) == [10, 10, 10, 30]
    timeline = [(0, 1), (10, 3), (20, 1), (40, 0)]
    assert sum(billed(app).values()) == replica_minutes(timeline, end=40) == 60


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_a_deleted_app_stops_billing_when_its_replicas_go(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    data_bucket: Bucket,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(k8s_cluster.store, "now", clock)
    access = access_for(project)
    data = {
        "name": "bot",
        "flavor": "ai1-1-cpu",
        "model": f"{data_bucket.name}@LOCAL/tiny-llama",
        "model_name": "bot",
        "replicas": 2,
    }
    app = app_create(access=access, user=owner, data=data)
    admit_jobs(project_id=project.pk)
    reconcile(str(app.pk))
    run_all(k8s_cluster, app)
    sweep()
    assert len(open_uids(app)) == 2

    clock.to(15)
    app_delete(access=access, user=owner, app=app)
    reconcile(str(app.pk))
    assert not App.objects.filter(pk=app.pk).exists()
    runs = JobRun.objects.filter(project=project)
    assert [run.finished_at for run in runs] == [clock(), clock()]  # not billed on and on
    clock.to(60)
    assert sorted(Line.objects.filter(run__in=runs).values_list("minutes", flat=True)) == [15, 15]


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_a_listing_older_than_a_new_replica_does_not_end_its_run(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    data_bucket: Bucket,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sweep lists, a watch then records a second replica, then the sweep applies its
    listing (which lacks it): the panel reads the app again rather than end that run."""
    monkeypatch.setattr(k8s_cluster.store, "now", clock)
    data = {
        "name": "bot",
        "flavor": "ai1-1-cpu",
        "model": f"{data_bucket.name}@LOCAL/tiny-llama",
        "model_name": "bot",
        "scaling": "cpu",
        "max_replicas": 2,
        "target_cpu": 70,
    }
    app = app_create(access=access_for(project), user=owner, data=data)
    admit_jobs(project_id=project.pk)
    reconcile(str(app.pk))
    run_all(k8s_cluster, app)
    sweep()
    [listed] = k8s_jobs.observe_all(namespace=NS)  # the sweep's listing: one replica

    clock.to(5)
    k8s_cluster.store.patch("deployments", NS, f"app-{app.pk}", {"spec": {"replicas": 2}})
    k8s_cluster.reconcile()
    run_all(k8s_cluster, app)
    assert record_observation(k8s_jobs.observe_app(ref=listed.ref))  # the watch
    assert len(open_uids(app)) == 2
    clock.to(6)
    record_observation(listed)  # the older listing, applied late
    assert len(open_uids(app)) == 2
