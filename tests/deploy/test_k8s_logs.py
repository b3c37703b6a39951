"""Incremental pod logs: every line exactly once, in order, across reads and same-second lines."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deploy.kubernetes import KubernetesBackend
from deploy.kubernetes.logs import Cursor, new_lines, parse_timestamp, since_time, split_lines
from deploy.types import JobRequest
from tests.deploy.conftest import make_job_request
from tests.fixtures.k8s_emulator import EmulatedCluster
from tests.fixtures.k8s_emulator.server import rfc3339_nano

NS = "ajuste-vision"
SECOND = datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC)


def running_job(cluster: EmulatedCluster, backend: KubernetesBackend) -> tuple[JobRequest, str]:
    job = make_job_request(volumes=())
    backend.apply_job(job=job)
    pod = cluster.pod_of(NS, "job-42-r1")
    cluster.kubelet.run(NS, pod)
    return job, pod


def test_timestamps_keep_their_nanoseconds() -> None:
    assert parse_timestamp("2026-05-01T10:00:00Z") == 1777629600 * 10**9
    assert parse_timestamp("2026-05-01T10:00:00.5Z") == 1777629600 * 10**9 + 500_000_000
    assert parse_timestamp("2026-05-01T10:00:00.000000007Z") == 1777629600 * 10**9 + 7
    assert since_time(1777629600 * 10**9 + 999) == "2026-05-01T10:00:00Z"
    assert since_time(-1) is None


def test_a_line_without_its_newline_waits_for_the_next_read() -> None:
    body = "2026-05-01T10:00:00.1Z one\n2026-05-01T10:00:00.2Z tw"
    assert split_lines(body) == [(parse_timestamp("2026-05-01T10:00:00.1Z"), "one")]


@pytest.mark.k8s
@pytest.mark.usefixtures("vision_namespace")
def test_reads_continue_where_the_cursor_stopped(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    job, pod = running_job(k8s_cluster, k8s_backend)
    k8s_cluster.kubelet.log(NS, pod, "step 1", "step 2", at=SECOND)
    first = k8s_backend.read_logs(ref=job.ref, cursor=None)
    assert (first.lines, first.eof) == (("step 1", "step 2"), False)
    assert k8s_backend.read_logs(ref=job.ref, cursor=first.cursor).lines == ()

    # Same second, even the same nanosecond: sinceTime cannot tell them apart, the cursor can.
    k8s_cluster.kubelet.log(NS, pod, "step 3", at=SECOND)
    k8s_cluster.kubelet.log(NS, pod, "step 4")
    second = k8s_backend.read_logs(ref=job.ref, cursor=first.cursor)
    assert second.lines == ("step 3", "step 4")

    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    last = k8s_backend.read_logs(ref=job.ref, cursor=second.cursor, fresh=True)
    assert (last.lines, last.eof) == ((), True)


@pytest.mark.usefixtures("vision_namespace")
def test_a_running_pod_is_read_again_with_one_request(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    """The collector reads a printing job every quarter second: the pod seen running is
    remembered for a few seconds, so a read costs the log request alone, not a pod listing and
    an owner check too; a fresh read (the archive's) looks again and sees the end."""
    job, pod = running_job(k8s_cluster, k8s_backend)
    k8s_cluster.kubelet.log(NS, pod, "one")
    first = k8s_backend.read_logs(ref=job.ref, cursor=None)
    before = k8s_cluster.request_count
    k8s_cluster.kubelet.log(NS, pod, "two")
    second = k8s_backend.read_logs(ref=job.ref, cursor=first.cursor)
    assert second.lines == ("two",) and k8s_cluster.request_count == before + 1
    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    remembered = k8s_backend.read_logs(ref=job.ref, cursor=second.cursor)
    assert (remembered.lines, remembered.eof) == ((), False)  # not known yet: read later
    last = k8s_backend.read_logs(ref=job.ref, cursor=second.cursor, fresh=True)
    assert (last.lines, last.eof) == ((), True)


@pytest.mark.k8s
@pytest.mark.usefixtures("vision_namespace")
def test_limit_pages_through_a_long_log(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    job, pod = running_job(k8s_cluster, k8s_backend)
    k8s_cluster.kubelet.log(NS, pod, *(f"line {i}" for i in range(250)))
    cursor, seen = None, []
    for _ in range(5):
        chunk = k8s_backend.read_logs(ref=job.ref, cursor=cursor, limit=100)
        seen.extend(chunk.lines)
        cursor = chunk.cursor
    assert seen == [f"line {i}" for i in range(250)]


@pytest.mark.k8s
@pytest.mark.usefixtures("vision_namespace")
def test_no_log_before_the_container_starts_and_none_after_deletion(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    job = make_job_request(volumes=())
    k8s_backend.apply_job(job=job)
    waiting = k8s_backend.read_logs(ref=job.ref, cursor=None)
    assert (waiting.lines, waiting.eof) == ((), False)
    k8s_backend.delete_job(ref=job.ref)
    gone = k8s_backend.read_logs(ref=job.ref, cursor=waiting.cursor)
    assert (gone.lines, gone.eof) == ((), True)


@pytest.mark.k8s
@pytest.mark.usefixtures("vision_namespace")
def test_a_new_pod_starts_its_log_from_the_beginning(
    k8s_cluster: EmulatedCluster, k8s_backend: KubernetesBackend
) -> None:
    job, pod = running_job(k8s_cluster, k8s_backend)
    # A Job that retries (ours do not: backoffLimit 0), so a preempted pod is replaced.
    k8s_backend.api.patch("Job", NS, "job-42-r1", {"spec": {"backoffLimit": 1}})
    k8s_cluster.kubelet.log(NS, pod, "first pod")
    cursor = k8s_backend.read_logs(ref=job.ref, cursor=None).cursor
    k8s_cluster.store.delete("pods", NS, pod)  # e.g. preempted
    k8s_cluster.back_off()
    new_pod = k8s_cluster.pod_of(NS, "job-42-r1")
    k8s_cluster.kubelet.run(NS, new_pod)
    k8s_cluster.kubelet.log(NS, new_pod, "second pod")
    assert k8s_backend.read_logs(ref=job.ref, cursor=cursor).lines == ("second pod",)


# A log is groups of lines sharing a timestamp (as fast writers produce); the reader polls at
# random moments with random limits. Whatever the interleaving, it sees each line once.
groups = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 999_999_999), st.integers(1, 4)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(groups=groups, polls=st.lists(st.tuples(st.integers(0, 12), st.integers(1, 5)), max_size=20))
def test_every_line_exactly_once_whatever_the_polling(
    groups: list[tuple[int, int, int]], polls: list[tuple[int, int]]
) -> None:
    log: list[tuple[int, str]] = []
    stamp = parse_timestamp("2026-05-01T10:00:00Z")
    for seconds, nanos, count in groups:
        stamp = max(stamp, stamp + seconds * 10**9 + (nanos if seconds else 0))
        log.extend((stamp, f"l{len(log) + i}") for i in range(count))

    def kubelet(since: str | None, upto: int) -> str:
        floor = parse_timestamp(since) if since else 0
        return "".join(f"{rfc3339_nano(ns)} {text}\n" for ns, text in log[:upto] if ns >= floor)

    cursor, seen, written = Cursor("pod"), [], 0
    for advance, limit in [*polls, *[(len(log), 5)] * (len(log) + 1)]:
        written = min(len(log), written + advance)
        lines, cursor = new_lines(
            split_lines(kubelet(since_time(cursor.last_ns), written)), cursor, limit=limit
        )
        seen.extend(lines)
    assert seen == [text for _, text in log]
