"""The emulator's watches and selectors as a real API server serves them, through the official
client's `Watch` where it can: initial ADDED events when no resourceVersion (or "0") is given,
never 410 for "0"; sendInitialEvents with its end bookmark; BOOKMARKs when allowed; a too-old
resourceVersion answered with a 410 ERROR event; malformed label and field selectors, and
fields a resource does not index, refused with 400 before anything is served."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import watch
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = [pytest.mark.k8s]

NS = "watched"
Obj = dict[str, Any]
PODS = f"/api/v1/namespaces/{NS}/pods"


@pytest.fixture
def core(k8s_cluster: EmulatedCluster) -> Iterator[CoreV1Api]:
    k8s_cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    client = k8s_cluster.api_client()
    yield CoreV1Api(client)
    client.close()


def add_pod(core: CoreV1Api, name: str, **labels: str) -> str:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}}
    body["spec"] = {"containers": [{"name": "main", "image": "busybox"}]}
    return str(core.create_namespaced_pod(NS, body).metadata.resource_version)


def events(core: CoreV1Api, **options: Any) -> list[tuple[str, Obj]]:
    """Every event of one watch of the namespace's pods that ends after `timeout_seconds`."""
    options.setdefault("timeout_seconds", 1)
    stream = watch.Watch().stream(core.list_namespaced_pod, NS, **options)
    return [(event["type"], event["raw_object"]) for event in stream]


def raw_watch(cluster: EmulatedCluster, query: str) -> tuple[int, list[Obj]]:
    response = urllib3.request(
        "GET", f"{cluster.url}{PODS}?watch=true&timeoutSeconds=1&{query}", headers=cluster.headers
    )
    lines = [json.loads(line) for line in response.data.decode().splitlines() if line.strip()]
    return response.status, lines


def test_a_watch_without_a_version_starts_with_the_current_state(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    add_pod(core, "a")
    add_pod(core, "b")
    seen = events(core)
    assert [(kind, obj["metadata"]["name"]) for kind, obj in seen] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]
    k8s_cluster.compact()  # "0" means any version: never too old
    seen = events(core, resource_version="0")
    assert [kind for kind, _ in seen] == ["ADDED", "ADDED"]
    assert k8s_cluster.watches.initial == 4 and k8s_cluster.watches.expired == 0


def test_a_watch_from_a_version_sends_only_what_changed_after_it(core: CoreV1Api) -> None:
    version = add_pod(core, "a")
    add_pod(core, "b")
    seen = events(core, resource_version=version)
    assert [(kind, obj["metadata"]["name"]) for kind, obj in seen] == [("ADDED", "b")]


def test_a_too_old_version_is_a_410_error_event(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    old = add_pod(core, "a")
    k8s_cluster.compact()
    status, lines = raw_watch(k8s_cluster, f"resourceVersion={old}")
    assert status == 200  # the cache's answer: the stream starts, then says why it ends
    [(event)] = lines
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    assert (
        event["object"]["message"]
        == f"too old resource version: {old} ({k8s_cluster.store.compacted_rv})"
    )
    with pytest.raises(ApiException) as raised:  # the official client gives up with it
        events(core, resource_version=old)
    assert raised.value.status == 410
    assert k8s_cluster.watches.expired >= 2


def test_bookmarks_come_only_when_allowed(k8s_cluster: EmulatedCluster, core: CoreV1Api) -> None:
    version = add_pod(core, "a")
    k8s_cluster.emulator.bookmark_s = 0.2
    seen = events(core, resource_version=version, allow_watch_bookmarks=True)
    bookmarks = [obj for kind, obj in seen if kind == "BOOKMARK"]
    assert bookmarks and [kind for kind, _ in seen if kind != "BOOKMARK"] == []
    assert bookmarks[-1] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(k8s_cluster.store.rv)},
    }
    assert [kind for kind, _ in events(core, resource_version=version)] == []


def test_send_initial_events_ends_them_with_a_bookmark(
    k8s_cluster: EmulatedCluster, core: CoreV1Api
) -> None:
    add_pod(core, "a")
    query = "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    status, lines = raw_watch(k8s_cluster, query)
    assert status == 200 and [e["type"] for e in lines[:2]] == ["ADDED", "BOOKMARK"]
    end = lines[1]["object"]["metadata"]
    assert end["annotations"] == {"k8s.io/initial-events-end": "true"}
    status, lines = raw_watch(k8s_cluster, "sendInitialEvents=true&allowWatchBookmarks=true")
    assert status == 422 and lines[0]["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    )


# -- selectors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            "team nlp",
            "unable to parse requirement: found 'nlp', expected: in, notin, =, ==, !=, gt, lt",
        ),
        ("team=nlp,", "found '', expected: identifier after ','"),
        ("team in nlp", "unable to parse requirement: found 'nlp' expected: '('"),
        ("team=nlp research", "found 'research', expected: ',' or 'end of string'"),
        ("-team=nlp", 'unable to parse requirement: <nil>: Invalid value: "-team": name part must'),
        ("team=a/b", 'unable to parse requirement: values[0]: Invalid value: "a/b": a valid label'),
    ],
    ids=[
        "no-operator",
        "trailing-comma",
        "set-without-parens",
        "two-values",
        "bad-key",
        "bad-value",
    ],
)
def test_a_malformed_label_selector_is_a_400_on_lists_and_watches(
    k8s_cluster: EmulatedCluster, core: CoreV1Api, selector: str, message: str
) -> None:
    for call in (
        lambda: core.list_namespaced_pod(NS, label_selector=selector),
        lambda: events(core, label_selector=selector),
    ):
        with pytest.raises(ApiException) as raised:
            call()
        body = json.loads(raised.value.body)
        assert (raised.value.status, body["reason"]) == (400, "BadRequest")
        assert body["message"].startswith(message)
    assert k8s_cluster.watches.initial == 0


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("spec.foo=1", "field label not supported: spec.foo"),
        ("metadata.labels.team=nlp", "field label not supported: metadata.labels.team"),
        ("status.phase", "invalid selector: 'status.phase'; can't understand 'status.phase'"),
    ],
    ids=["unknown-field", "labels-are-not-fields", "no-operator"],
)
def test_a_bad_field_selector_is_a_400(core: CoreV1Api, selector: str, message: str) -> None:
    with pytest.raises(ApiException) as raised:
        core.list_namespaced_pod(NS, field_selector=selector)
    assert raised.value.status == 400 and json.loads(raised.value.body)["message"] == message


def test_selectors_the_server_accepts_select(k8s_cluster: EmulatedCluster, core: CoreV1Api) -> None:
    """The positive control: set-based and existence label selectors, indexed fields."""
    add_pod(core, "a", team="nlp", tier="gpu")
    add_pod(core, "b", team="vision")
    k8s_cluster.kubelet.run(NS, "b")

    def names(**query: str) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(NS, **query).items]

    assert names(label_selector="team in (nlp,speech),tier") == ["a"]
    assert names(label_selector="team notin (nlp),!tier") == ["b"]
    assert names(field_selector="status.phase!=Running,metadata.name!=c") == ["a"]
    assert names(field_selector="spec.nodeName=gpu-node-1") == ["b"]
    seen = events(core, field_selector="metadata.name=b")
    assert [(kind, obj["metadata"]["name"]) for kind, obj in seen] == [("ADDED", "b")]
