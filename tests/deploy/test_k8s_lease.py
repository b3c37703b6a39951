"""Leader election on a coordination.k8s.io/v1 Lease (deploy/kubernetes/lease.py), two or three
contenders against the emulated API server through the official client. Time is a clock the
test moves: expiry counts on each contender's own clock, from when it saw the Lease change."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.api import KubeApi
from deploy.kubernetes.lease import LeaseLock, LeaseRecord
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = pytest.mark.k8s
NS = "ajuste"
NAME = "ajuste-sweep"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api(k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend) -> Iterator[KubeApi]:
    k8s_cluster.create_namespace(NS)
    yield k8s_backend.api


@pytest.fixture
def clock() -> Clock:
    return Clock()


def contender(api: KubeApi, clock: Clock, identity: str) -> LeaseLock:
    return LeaseLock(
        api,
        namespace=NS,
        name=NAME,
        identity=identity,
        duration_s=15,
        renew_deadline_s=10,
        clock=clock,
    )


def stored(cluster: EmulatedCluster) -> LeaseRecord:
    lease = cluster.get("leases", NS, NAME)
    assert lease is not None
    return LeaseRecord.of(lease)


def test_one_leader_and_a_handover_when_it_stops_renewing(
    k8s_cluster: EmulatedCluster, api: KubeApi, clock: Clock
) -> None:
    a, b = contender(api, clock, "web-a"), contender(api, clock, "web-b")
    assert a.try_acquire_or_renew() and a.leading()
    assert not b.try_acquire_or_renew() and not b.leading()
    clock.now += 5
    assert a.try_acquire_or_renew()  # renewed: b's wait starts again
    clock.now += 14
    assert not b.try_acquire_or_renew()
    # a stops renewing (killed, cut off): it stops leading at its renew deadline...
    clock.now += 10
    assert not a.leading()
    assert (
        not b.try_acquire_or_renew()
    )  # ...before b may take over (14 + 10 - 5 < 15 after b saw it)
    clock.now += 5
    assert b.try_acquire_or_renew() and b.leading()
    record = stored(k8s_cluster)
    assert (record.holder, record.duration_s, record.transitions) == ("web-b", 15, 1)
    assert not a.try_acquire_or_renew() and not a.leading()


def test_a_clean_stop_hands_over_at_once(
    k8s_cluster: EmulatedCluster, api: KubeApi, clock: Clock
) -> None:
    a, b = contender(api, clock, "watcher-a"), contender(api, clock, "watcher-b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release() and not a.leading()
    assert stored(k8s_cluster).holder == ""
    assert b.try_acquire_or_renew()  # no wait for the duration
    assert stored(k8s_cluster).holder == "watcher-b"
    assert not a.release()  # not a's any more


def test_two_contenders_racing_for_a_free_lease_one_wins(
    k8s_cluster: EmulatedCluster, api: KubeApi, clock: Clock
) -> None:
    """Optimistic concurrency: both decided on the same resourceVersion; the API server
    takes the first write and answers 409 to the second."""
    a, b, c = (contender(api, clock, name) for name in ("a", "b", "c"))
    assert a.try_acquire_or_renew()
    assert a.release()
    seen_by_c = api.read("Lease", NS, NAME)  # c reads the free lease, then is slow to write
    assert b.try_acquire_or_renew()
    c._read = lambda: seen_by_c  # type: ignore[method-assign]
    assert not c.try_acquire_or_renew() and not c.leading()
    assert stored(k8s_cluster).holder == "b"
    assert stored(k8s_cluster).transitions == 1  # a release is no transition; b taking it is


def test_two_contenders_creating_the_lease_one_wins(
    k8s_cluster: EmulatedCluster, api: KubeApi, clock: Clock
) -> None:
    a, b = contender(api, clock, "a"), contender(api, clock, "b")
    b._read = lambda: None  # type: ignore[method-assign]  # b saw no Lease, a made it since
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert stored(k8s_cluster).holder == "a"


def test_an_old_renew_time_does_not_hand_over_early(
    k8s_cluster: EmulatedCluster, api: KubeApi, clock: Clock
) -> None:
    """The holder's node clock lags an hour: its renewTime looks expired to anyone comparing
    it with their own clock. Expiry counts from when the follower saw the Lease change."""
    a, b = contender(api, clock, "a"), contender(api, clock, "b")
    assert a.try_acquire_or_renew()
    lease = api.read("Lease", NS, NAME)
    api.patch("Lease", NS, NAME, {"spec": {"renewTime": "2020-01-01T00:00:00.000000Z"}})
    assert LeaseRecord.of(api.read("Lease", NS, NAME)).renew_time.startswith("2020")
    assert not b.try_acquire_or_renew()
    clock.now += 14
    assert not b.try_acquire_or_renew()
    assert lease["spec"]["holderIdentity"] == stored(k8s_cluster).holder == "a"


def test_an_api_outage_keeps_the_leader_until_its_deadline_only(
    k8s_cluster: EmulatedCluster, api: KubeApi, clock: Clock
) -> None:
    a = contender(api, clock, "a")
    assert a.try_acquire_or_renew()
    clock.now += 4
    k8s_cluster.fail_next("GET", "leases", status=500, times=4)  # every retry of one read
    assert a.try_acquire_or_renew() and a.leading()  # a failed renewal: still within the deadline
    clock.now += 7
    k8s_cluster.fail_next("GET", "leases", status=500, times=4)
    assert not a.try_acquire_or_renew() and not a.leading()


def test_bad_settings_are_refused(api: KubeApi, clock: Clock) -> None:
    with pytest.raises(ValueError, match="shorter than duration_s"):
        LeaseLock(api, namespace=NS, name=NAME, identity="a", duration_s=10, renew_deadline_s=10)
    with pytest.raises(ValueError, match="identity"):
        LeaseLock(api, namespace=NS, name=NAME, identity="")
