"""Leader election of the panel's singletons (engine/leader.py): two watcher replicas and two
beat replicas contend for their Lease on the emulated API server; only the holder acts, and the
other takes over when the holder stops renewing. Time is a clock the test moves (expiry counts
on each contender's own clock), so a takeover is decided by the Lease, not by waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controlpanel.celery import app as celery_app
from controlpanel.core.install import install_id
from controlpanel.engine import backend as engine_backend
from controlpanel.engine.backend import ensure_project
from controlpanel.engine.leader import SWEEP_LEASE, WATCH_LEASE, Leadership, leadership
from controlpanel.engine.leaderbeat import LeaderScheduler
from controlpanel.engine.management.commands.watch_workloads import watch_while_leading
from controlpanel.projects.models import Project
from deploy.kubernetes.backend import KubernetesBackend
from deploy.kubernetes.lease import LeaseLock, LeaseRecord
from deploy.types import ObservedWorkload, TransientError
from tests.controlpanel.engine.test_orphans import a_job

pytestmark = [pytest.mark.k8s]
PANEL_NS = "ajuste"
WAIT_S = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def backend(k8s_cluster: Any, settings: Any) -> Iterator[KubernetesBackend]:
    settings.COMPUTE_BACKEND = "kubernetes"
    k8s_cluster.create_namespace(PANEL_NS)
    client = k8s_cluster.api_client()
    made = KubernetesBackend(api_client=client, watch_timeout_s=1, install_id=install_id())
    engine_backend.set_backend(made)
    yield made
    engine_backend.set_backend(None)
    client.close()


def contender(backend: KubernetesBackend, clock: Clock, name: str, identity: str) -> Leadership:
    lock = LeaseLock(
        backend.api,
        namespace=PANEL_NS,
        name=name,
        identity=identity,
        duration_s=15,
        renew_deadline_s=10,
        clock=clock,
    )
    return Leadership(lock, retry_s=0.05)


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "not within a minute"
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_one_watcher_records_and_the_other_takes_over_when_it_stops_renewing(
    k8s_cluster: Any, backend: KubernetesBackend, project: Project
) -> None:
    clock = Clock()
    first, second = (contender(backend, clock, WATCH_LEASE, i) for i in ("first", "second"))
    assert first.renew() and not second.renew()
    recorded: dict[str, list[str]] = {"first": [], "second": []}
    stops = {"first": threading.Event(), "second": threading.Event()}

    def replica(name: str, leader: Leadership) -> threading.Thread:
        def record(observed: ObservedWorkload) -> None:
            recorded[name].append(observed.id)

        thread = threading.Thread(
            target=watch_while_leading,
            args=(stops[name], leader),
            kwargs={"record": record, "poll_s": 0.1, "resync_s": 300.0},
        )
        thread.start()
        return thread

    threads = [replica("first", first), replica("second", second)]
    try:
        ensure_project(project)
        job = a_job(backend, project)
        wait_for(lambda: job.id in recorded["first"])
        assert recorded["second"] == []  # waiting, not watching

        # The first replica stops renewing (killed, partitioned): past the Lease's duration
        # the second takes it, relists and records what the first did.
        clock.now += 16
        assert not first.leading()
        seen_by_first = len(recorded["first"])
        assert second.renew()
        wait_for(lambda: job.id in recorded["second"])
        assert len(recorded["first"]) == seen_by_first  # nothing after its term ended
        assert not first.renew()  # the Lease is the second's now
    finally:
        for stop in stops.values():
            stop.set()
        for thread in threads:
            thread.join(WAIT_S)
    assert not any(thread.is_alive() for thread in threads)


class CutOff:
    """A replica's way to the API server, cut (a network partition): every call fails, as the
    client's do when nothing answers. `calls` counts them."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def fail(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            raise TransientError(f"{name}: the API server did not answer")

        return fail


def a_beat(tmp_path: Path, name: str, leader: Leadership) -> tuple[LeaderScheduler, list[str]]:
    """A beat replica's scheduler with one task due at every tick; what it sends is noted."""
    scheduler = LeaderScheduler(app=celery_app, schedule_filename=str(tmp_path / name), lazy=True)
    scheduler.leader = leader
    scheduler.setup_schedule()
    sent: list[str] = []
    scheduler.apply_entry = lambda entry, producer=None: sent.append(entry.name)
    scheduler.__dict__["producer"] = None  # no broker: apply_entry above sends
    scheduler.update_from_dict({"probe": {"task": "probe", "schedule": 0.001}})
    return scheduler, sent


@pytest.mark.django_db
def test_only_the_beat_holding_the_lease_sends_and_the_other_takes_over(
    backend: KubernetesBackend, tmp_path: Path
) -> None:
    clock = Clock()
    first, second = (contender(backend, clock, SWEEP_LEASE, i) for i in ("first", "second"))
    assert first.renew() and not second.renew()
    (one, sent_one), (two, sent_two) = (
        a_beat(tmp_path, "one", first),
        a_beat(tmp_path, "two", second),
    )
    try:
        for _ in range(3):
            time.sleep(0.002)  # the probe's 1 ms interval: due at each tick
            one.tick()
            two.tick()
        assert "probe" in sent_one and sent_two == []
        assert (tmp_path / "two.follower").exists()  # what its liveness probe reads

        # The first stops renewing (cut off from the API server; its renewing thread, which
        # setup_schedule started, goes on trying): once a call of its thread has failed, no
        # renewal of the first is still under way; once the second's thread has seen the last
        # one, the Lease's duration counts from there and, past it, that thread takes the
        # Lease. The first stops sending at its renew deadline, before that.
        cut = CutOff()
        assert first.lock is not None and second.lock is not None
        first.lock.api = cut  # type: ignore[assignment]
        wait_for(lambda: cut.calls > 0)
        last = LeaseRecord.of(backend.api.read("Lease", PANEL_NS, SWEEP_LEASE))
        wait_for(lambda: second.lock is not None and second.lock.observed == last)
        clock.now += 16
        assert not first.leading()
        wait_for(second.leading)
        before = len(sent_one)
        for _ in range(3):
            time.sleep(0.002)
            one.tick()
            two.tick()
        assert len(sent_one) == before and "probe" in sent_two
        held = LeaseRecord.of(backend.api.read("Lease", PANEL_NS, SWEEP_LEASE))
        assert held.holder == "second" and held.transitions == last.transitions + 1
    finally:
        one.close()
        two.close()


@pytest.mark.django_db
def test_on_kubernetes_the_lease_is_in_the_panels_namespace(
    backend: KubernetesBackend, settings: Any
) -> None:
    settings.LEADER_ELECTION, settings.KUBERNETES_NAMESPACE = True, PANEL_NS
    settings.LEADER_LEASE_SECONDS = 15
    contending = leadership(SWEEP_LEASE)
    assert contending.lock is not None and not contending.leading()
    assert (contending.lock.namespace, contending.lock.name) == (PANEL_NS, SWEEP_LEASE)
    assert contending.renew() and contending.leading()
    stop = threading.Event()
    contending.start(stop)
    stop.set()
    contending.join()  # a clean stop lets the Lease go: the next contender takes it at once
    assert contender(backend, Clock(), SWEEP_LEASE, "next").renew()
    settings.LEADER_ELECTION = False
    assert leadership(SWEEP_LEASE).lock is None


def test_without_a_lease_a_replica_always_leads(settings: Any) -> None:
    """The local backend (one process of each under make run), or LEADER_ELECTION off."""
    settings.COMPUTE_BACKEND = "local"
    engine_backend.set_backend(None)
    try:
        alone = leadership(WATCH_LEASE)
        assert alone.lock is None and alone.leading() and alone.renew()
        assert alone.wait_leading(threading.Event())
    finally:
        engine_backend.set_backend(None)
