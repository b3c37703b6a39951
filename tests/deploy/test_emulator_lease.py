"""coordination.k8s.io/v1 Leases on the emulator, through the official client's
CoordinationV1Api: what leader election needs of a real API server. Every update carries the
resourceVersion it read; of two candidates that read the same expired lease and both try to
take it, one wins and the other gets 409 Conflict and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client import CoordinationV1Api, V1Lease, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = pytest.mark.k8s

NS = "ajuste"
EXPIRED = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture
def leases(k8s_cluster: EmulatedCluster) -> Iterator[CoordinationV1Api]:
    k8s_cluster.create_namespace(NS)
    client = k8s_cluster.api_client()
    yield CoordinationV1Api(client)
    client.close()


@pytest.fixture
def second(k8s_cluster: EmulatedCluster) -> Iterator[CoordinationV1Api]:
    """Another replica's client: its own connection, its own reads."""
    client = k8s_cluster.api_client()
    yield CoordinationV1Api(client)
    client.close()


def lease(holder: str, *, renewed: datetime = EXPIRED, transitions: int = 0) -> V1Lease:
    return V1Lease(
        api_version="coordination.k8s.io/v1",
        kind="Lease",
        metadata=V1ObjectMeta(name="ajuste-sweep"),
        spec=V1LeaseSpec(
            holder_identity=holder,
            lease_duration_seconds=15,
            acquire_time=renewed,
            renew_time=renewed,
            lease_transitions=transitions,
        ),
    )


def take(current: V1Lease, holder: str) -> V1Lease:
    """What a candidate writes to take over `current` (which it read)."""
    now = datetime.now(UTC)
    current.spec.holder_identity = holder
    current.spec.acquire_time = now
    current.spec.renew_time = now
    current.spec.lease_transitions = (current.spec.lease_transitions or 0) + 1
    return current


def test_a_lease_is_created_read_and_renewed_with_its_resource_version(
    leases: CoordinationV1Api,
) -> None:
    created = leases.create_namespaced_lease(NS, lease("watcher-a"))
    assert created.spec.holder_identity == "watcher-a"
    assert created.spec.renew_time == EXPIRED  # MicroTime keeps the microseconds
    read = leases.read_namespaced_lease("ajuste-sweep", NS)
    assert read.metadata.resource_version == created.metadata.resource_version
    read.spec.renew_time = EXPIRED + timedelta(seconds=10)
    renewed = leases.replace_namespaced_lease("ajuste-sweep", NS, read)
    assert int(renewed.metadata.resource_version) > int(read.metadata.resource_version)
    assert renewed.metadata.uid == created.metadata.uid
    assert renewed.spec.renew_time == EXPIRED + timedelta(seconds=10)


def test_two_candidates_racing_for_an_expired_lease_one_wins_the_other_gets_409(
    leases: CoordinationV1Api, second: CoordinationV1Api
) -> None:
    leases.create_namespaced_lease(NS, lease("watcher-dead"))
    seen_by_a = leases.read_namespaced_lease("ajuste-sweep", NS)
    seen_by_b = second.read_namespaced_lease("ajuste-sweep", NS)
    won = leases.replace_namespaced_lease("ajuste-sweep", NS, take(seen_by_a, "watcher-a"))
    with pytest.raises(ApiException) as lost:
        second.replace_namespaced_lease("ajuste-sweep", NS, take(seen_by_b, "watcher-b"))
    assert lost.value.status == 409
    status = json.loads(lost.value.body)
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "ajuste-sweep": the object '
        "has been modified; please apply your changes to the latest version and try again"
    )
    stored = leases.read_namespaced_lease("ajuste-sweep", NS)
    assert (stored.spec.holder_identity, stored.spec.lease_transitions) == ("watcher-a", 1)
    assert stored.metadata.resource_version == won.metadata.resource_version


def test_the_loser_retries_from_a_fresh_read_and_sees_the_new_holder(
    leases: CoordinationV1Api, second: CoordinationV1Api
) -> None:
    leases.create_namespaced_lease(NS, lease("watcher-dead"))
    stale = second.read_namespaced_lease("ajuste-sweep", NS)
    fresh = leases.read_namespaced_lease("ajuste-sweep", NS)
    leases.replace_namespaced_lease("ajuste-sweep", NS, take(fresh, "watcher-a"))
    with pytest.raises(ApiException) as lost:
        second.patch_namespaced_lease(
            "ajuste-sweep",
            NS,
            {
                "metadata": {"resourceVersion": stale.metadata.resource_version},
                "spec": {"holderIdentity": "watcher-b"},
            },
        )
    assert lost.value.status == 409
    again = second.read_namespaced_lease("ajuste-sweep", NS)
    assert again.spec.holder_identity == "watcher-a"  # it follows, it does not take over


def test_a_second_create_of_the_same_lease_is_409_already_exists(
    leases: CoordinationV1Api, second: CoordinationV1Api
) -> None:
    leases.create_namespaced_lease(NS, lease("watcher-a"))
    with pytest.raises(ApiException) as raced:
        second.create_namespaced_lease(NS, lease("watcher-b"))
    assert raced.value.status == 409
    assert json.loads(raced.value.body)["reason"] == "AlreadyExists"
    assert leases.read_namespaced_lease("ajuste-sweep", NS).spec.holder_identity == "watcher-a"


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"leaseDurationSeconds": 0}, "spec.leaseDurationSeconds", "must be greater than 0"),
        ({"leaseTransitions": -1}, "spec.leaseTransitions", "must be greater than or equal to 0"),
    ],
)
def test_an_invalid_lease_is_422_and_nothing_is_stored(
    leases: CoordinationV1Api, k8s_cluster: EmulatedCluster, spec: dict, field: str, message: str
) -> None:
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "ajuste-sweep"},
        "spec": {"holderIdentity": "a", **spec},
    }
    with pytest.raises(ApiException) as refused:
        leases.create_namespaced_lease(NS, body)
    assert refused.value.status == 422
    causes = {c["field"]: c["message"] for c in json.loads(refused.value.body)["details"]["causes"]}
    assert causes[field].endswith(message)
    assert k8s_cluster.get("leases", NS, "ajuste-sweep") is None


def test_an_update_that_breaks_the_lease_is_422_and_the_holder_stays(
    leases: CoordinationV1Api,
) -> None:
    current = leases.create_namespaced_lease(NS, lease("watcher-a"))
    current.spec.holder_identity = "watcher-b"
    current.spec.lease_duration_seconds = -5
    with pytest.raises(ApiException) as refused:
        leases.replace_namespaced_lease("ajuste-sweep", NS, current)
    assert refused.value.status == 422
    assert leases.read_namespaced_lease("ajuste-sweep", NS).spec.holder_identity == "watcher-a"


def test_a_lease_in_a_missing_namespace_or_of_another_name_is_refused(
    leases: CoordinationV1Api,
) -> None:
    with pytest.raises(ApiException) as missing:
        leases.create_namespaced_lease("ajuste-nowhere", lease("watcher-a"))
    assert missing.value.status == 404
    created = leases.create_namespaced_lease(NS, lease("watcher-a"))
    created.metadata.name = "other"
    with pytest.raises(ApiException) as renamed:
        leases.replace_namespaced_lease("ajuste-sweep", NS, created)
    assert renamed.value.status == 400
