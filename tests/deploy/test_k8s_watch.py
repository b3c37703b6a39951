"""List, then watch from the list's resourceVersion; relist on 410, on errors, on a timer."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator

import pytest

from deploy.kubernetes import KubernetesBackend
from deploy.types import JobRequest, ObservedWorkload, Phase
from tests.fixtures.k8s_emulator import EmulatedCluster

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("vision_namespace")]

NS = "ajuste-vision"
WAIT_S = 10.0


class Watching:
    """The backend's watch in a thread, its observations in a queue."""

    def __init__(self, backend: KubernetesBackend, resync_s: float) -> None:
        self.stop = threading.Event()
        self.seen: queue.Queue[ObservedWorkload] = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(backend, resync_s), daemon=True)
        self.thread.start()

    def _run(self, backend: KubernetesBackend, resync_s: float) -> None:
        for observed in backend.watch(stop=self.stop, resync_s=resync_s):
            self.seen.put(observed)

    def wait_for(self, test: Callable[[ObservedWorkload], bool]) -> ObservedWorkload:
        while True:
            observed = self.seen.get(timeout=WAIT_S)
            if test(observed):
                return observed


@pytest.fixture
def watching(k8s_backend: KubernetesBackend) -> Iterator[Callable[[float], Watching]]:
    started: list[Watching] = []

    def start(resync_s: float = 300.0) -> Watching:
        started.append(Watching(k8s_backend, resync_s))
        return started[-1]

    yield start
    for watch in started:
        watch.stop.set()
        watch.thread.join(WAIT_S)
        assert not watch.thread.is_alive()


def test_changes_arrive_as_they_happen(
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    job_request: JobRequest,
    watching: Callable[[float], Watching],
) -> None:
    k8s_backend.apply_job(job=job_request)
    watch = watching(300.0)
    assert watch.wait_for(lambda o: o.id == "42").phase is Phase.PENDING  # from the list
    pod = k8s_cluster.pod_of(NS, "job-42-r1")
    k8s_cluster.kubelet.run(NS, pod)
    running = watch.wait_for(lambda o: o.phase is Phase.RUNNING)
    assert running.run_uid is not None and running.started_at is not None


def test_a_deleted_pod_still_tells_how_the_run_ended(
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    job_request: JobRequest,
    watching: Callable[[float], Watching],
) -> None:
    k8s_backend.apply_job(job=job_request)
    k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, "job-42-r1"))
    watch = watching(300.0)
    watch.wait_for(lambda o: o.phase is Phase.RUNNING)
    k8s_cluster.advance(job_request.timeout_s + 1)  # the Job controller kills and deletes it
    ended = watch.wait_for(lambda o: o.phase is Phase.FINALIZING and o.exit_code == 143)
    assert ended.started_at is not None and ended.finished_at is not None


def test_410_gone_makes_it_relist(
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    job_request: JobRequest,
    watching: Callable[[float], Watching],
) -> None:
    k8s_backend.apply_job(job=job_request)
    watch = watching(300.0)
    watch.wait_for(lambda o: o.phase is Phase.PENDING)
    k8s_cluster.compact()  # the watch's resourceVersion is now too old
    k8s_cluster.kubelet.run(NS, k8s_cluster.pod_of(NS, "job-42-r1"))
    assert watch.wait_for(lambda o: o.phase is Phase.RUNNING).id == "42"
    lists = [
        r
        for r in k8s_cluster.requests()
        if r.url.path == "/api/v1/pods" and r.params.get("watch") != "true"
    ]
    assert len(lists) == 2  # the first list, and the relist after 410 Gone
    assert k8s_cluster.watches.expired == 1  # the 410 the relist answered


def test_errors_and_the_timer_make_it_relist(
    k8s_cluster: EmulatedCluster,
    k8s_backend: KubernetesBackend,
    job_request: JobRequest,
    watching: Callable[[float], Watching],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr("deploy.kubernetes.api.RETRY_DELAYS_S", (0.01,))
    k8s_backend.apply_job(job=job_request)
    # The first list fails (its call and its one retry), and so does the relist's first try.
    failing = k8s_cluster.fail_next("GET", "jobs", status=500, times=3)
    with caplog.at_level(logging.WARNING, logger="deploy.kubernetes.watcher"):
        watch = watching(1.0)
        first = watch.wait_for(lambda o: o.id == "42")
    assert failing.served == 3  # every injected 500 reached the watcher...
    assert any(  # ...which gave up on that list, said so, and listed again
        "watch failed (the Kubernetes API did not answer: HTTP 500" in r.getMessage()
        for r in caplog.records
    )
    again = watch.wait_for(lambda o: o.id == "42")  # no change: the resync timer relisted
    assert first == again
    job_lists = [
        r
        for r in k8s_cluster.requests()
        if r.url.path == "/apis/batch/v1/jobs" and r.params.get("watch") != "true"
    ]
    assert len(job_lists) >= 5  # 3 refused, the relist's retry, the timer's relist


def test_a_silent_watch_connection_counts_as_dead(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that answers the watch's headers, then never another byte (a half-open
    socket behind a vanished load balancer): the read times out instead of hanging."""
    import socket

    import urllib3
    from kubernetes.client import ApiClient, Configuration

    from deploy.kubernetes import api as api_module

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    held: list[socket.socket] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        conn.sendall(b"Transfer-Encoding: chunked\r\n\r\n")
        held.append(conn)  # open, silent

    threading.Thread(target=serve, daemon=True).start()
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{listener.getsockname()[1]}"
    monkeypatch.setattr(api_module, "WATCH_GRACE_S", 0.5)
    kube = api_module.KubeApi(ApiClient(configuration))
    # Without a read timeout this would hang until pytest-timeout ends the test.
    with pytest.raises((urllib3.exceptions.HTTPError, OSError)):
        list(kube.watch("Pod", None, label_selector="a=b", resource_version="1", timeout_s=1))
    listener.close()
