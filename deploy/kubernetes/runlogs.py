"""`RunLogs`: a run's log read from the pod running its user's process, for the log collector
(`KubernetesBackend.read_logs`). The pod last seen running is remembered for a few seconds, so
a read costs the log request alone, not a pod listing and its owner's read."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from kubernetes.client.exceptions import ApiException

from deploy import names
from deploy.kubernetes.api import KubeApi, Obj
from deploy.kubernetes.driver import driver
from deploy.kubernetes.follow import follow_pod_log
from deploy.kubernetes.listing import owned
from deploy.kubernetes.logs import read_pod_log
from deploy.kubernetes.pods import container_run, container_status, main_component, newest
from deploy.types import LogChunk, WorkloadRef

# How long a pod seen running is read without checking it again (a replaced or finished pod
# is noticed at most this late; its end is read in full by the next, checked read).
RUNNING_POD_TTL_S = 5.0
# Lines a read of a pod not running takes at most (the collector's own limit).
COLLECT_BATCH = 5000


class RunLogs:
    def __init__(self, api: KubeApi, *, read_deadline_s: float = 10.0, follow_idle_s: float = 60.0):
        self.api = api
        # Each read's own limit (one stuck read holds no other), and how long a followed
        # stream may stay silent before it counts as dead and is opened again.
        self.read_deadline_s, self.follow_idle_s = read_deadline_s, follow_idle_s
        # The pod whose container was last seen running, per run: the log collector reads it
        # again without listing pods and reading its owner (1 request a read instead of 3).
        self.running_pods: dict[WorkloadRef, tuple[Obj, float]] = {}

    def read(self, ref: WorkloadRef, cursor: str | None, limit: int, *, fresh: bool) -> LogChunk:
        remembered, until = self.running_pods.get(ref, (None, 0.0))
        if remembered is not None and not fresh and time.monotonic() < until:
            chunk = self._read_pod(remembered, cursor, limit, finished=False)
            if not chunk.eof:  # eof here: the pod went away, look again
                return chunk
        self.running_pods.pop(ref, None)
        pod = newest(self.main_pods(ref))
        if pod is None:
            return LogChunk(lines=(), cursor=cursor or "", eof=self._ended(ref))
        run = container_run(container_status(pod, "main"))
        if run.state in ("", "waiting"):  # never started: its log ends if the run did
            return LogChunk(lines=(), cursor=cursor or "", eof=self._ended(ref))
        if run.state == "running":
            now = time.monotonic()
            if len(self.running_pods) > 1000:  # forget runs that ended long ago
                self.running_pods = {k: v for k, v in self.running_pods.items() if v[1] > now}
            self.running_pods[ref] = (pod, now + RUNNING_POD_TTL_S)
        return self._read_pod(pod, cursor, limit, finished=run.state == "terminated")

    def follow(
        self, ref: WorkloadRef, cursor: str | None, *, keep: Callable[[], bool]
    ) -> Iterator[LogChunk]:
        """The run's log as its running pod prints it (a stream); a pod not running is read
        once. Ends with the container, a broken stream, or when `keep()` turns false."""
        self.running_pods.pop(ref, None)
        pod = newest(self.main_pods(ref))
        run = container_run(container_status(pod, "main")) if pod is not None else None
        if pod is None or run is None or run.state != "running":
            yield self.read(ref, cursor, COLLECT_BATCH, fresh=True)
            return
        meta = pod["metadata"]
        try:
            for read in follow_pod_log(
                self.api,
                namespace=meta["namespace"],
                pod=meta["name"],
                pod_uid=meta.get("uid", ""),
                container="main",
                cursor=cursor,
                keep=keep,
                idle_s=self.follow_idle_s,
            ):
                yield LogChunk(lines=tuple(read.lines), cursor=read.cursor, gap=read.gap)
        except ApiException as exc:
            if exc.status not in (400, 404):  # not started yet, or gone meanwhile
                raise

    def main_pods(self, ref: WorkloadRef) -> list[Obj]:
        """The pods running the user's process, as their Job or StatefulSet controls them (a
        pod that only carries the labels must not feed this run's log)."""
        component = {names.COMPONENT: main_component(ref)}
        selector = names.selector({**names.selector_labels(ref), **component})
        pods, _ = self.api.list("Pod", ref.namespace, label_selector=selector)
        return driver(ref.kind).main_pods(self.api, ref, owned(pods, ref.install))

    def _read_pod(self, pod: Obj, cursor: str | None, limit: int, *, finished: bool) -> LogChunk:
        meta = pod["metadata"]
        try:
            read = read_pod_log(
                self.api,
                namespace=meta["namespace"],
                pod=meta["name"],
                pod_uid=meta.get("uid", ""),
                container="main",
                cursor=cursor,
                limit=limit,
                deadline_s=self.read_deadline_s,
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # not started yet, or gone meanwhile
                return LogChunk(lines=(), cursor=cursor or "", eof=exc.status == 404)
            raise
        return LogChunk(
            lines=tuple(read.lines),
            cursor=read.cursor,
            eof=finished and read.at_end,
            skipped=read.skipped,
            gap=read.gap,
        )

    def _ended(self, ref: WorkloadRef) -> bool:
        return driver(ref.kind).state(self.api, ref).phase.is_final
