"""The one interface the panel drives: `ComputeBackend`, implemented by the `kubernetes` and
`local` backends. Every method is idempotent and returns quickly (no call waits for a workload
to run); the panel's Celery tasks call `apply_*` from `reconcile()` as often as they like.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from deploy.types import (
    AppRequest,
    Capacity,
    ClusterCapacity,
    JobRequest,
    LogChunk,
    NotebookRequest,
    ObservedWorkload,
    ProjectRequest,
    WorkloadRef,
)


@runtime_checkable
class ComputeBackend(Protocol):
    """Runs jobs and notebooks somewhere; see each method for its contract."""

    name: str

    def capacity(self) -> Capacity | None:
        """The cores and memory that every project's jobs share (a machine), for the panel to
        admit jobs within; None where the backend queues work itself (a cluster's scheduler)."""
        ...

    def cluster_capacity(self) -> ClusterCapacity:
        """GPUs by model (total, in use, unavailable), CPU and the nodes that take no new
        work, read now (the panel's periodic task calls it; no page does)."""
        ...

    def ensure_project(self, *, project: ProjectRequest) -> None:
        """Create or update the project's namespace, quota, policies and datastore Secret."""
        ...

    def apply_job(self, *, job: JobRequest) -> ObservedWorkload:
        """Reconcile one job run toward running to completion and return what is observed.

        Creates what is missing (nothing twice); once the user's process has ended it starts
        the final push of rw volumes (call again whenever the observation has `needs_apply`).
        """
        ...

    def stop_job(self, *, job: JobRequest) -> None:
        """Ask the user's process to stop (SIGTERM, then SIGKILL after a grace period).

        rw volumes are still pushed; the run ends STOPPED (or SYNC_FAILED).
        """
        ...

    def retry_push(self, *, job: JobRequest) -> None:
        """Start the final push again after SYNC_FAILED (the data was kept)."""
        ...

    def delete_job(self, *, ref: WorkloadRef) -> None:
        """Remove every object and file of this run, the kept workspace included."""
        ...

    def release_workspace(self, *, ref: WorkloadRef) -> None:
        """Free the storage a run that ended cleanly still holds (nothing is left to push);
        its log and state stay. Idempotent; a no-op where there is nothing to free."""
        ...

    def observe_job(self, *, ref: WorkloadRef) -> ObservedWorkload:
        """What this run looks like now (GONE when nothing of it exists)."""
        ...

    def read_logs(
        self, *, ref: WorkloadRef, cursor: str | None, limit: int = 1000, fresh: bool = False
    ) -> LogChunk:
        """Up to `limit` log lines of the user's process after `cursor` (None: the start).
        `fresh`: look the process up again (a backend may remember a running one for a few
        seconds); the final archive asks so, to learn where the log ends."""
        ...

    def apply_notebook(self, *, notebook: NotebookRequest) -> ObservedWorkload:
        """Reconcile a notebook: running or stopped as `notebook.running` says."""
        ...

    def delete_notebook(self, *, ref: WorkloadRef) -> None:
        """Remove the notebook and its workspace."""
        ...

    def observe_notebook(self, *, ref: WorkloadRef) -> ObservedWorkload:
        """What this notebook looks like now."""
        ...

    def apply_app(self, *, app: AppRequest) -> ObservedWorkload:
        """Reconcile an app: its replicas running (or none) as `app.running` and its scaling
        say, rolling to a changed spec without downtime; its address kept throughout."""
        ...

    def delete_app(self, *, ref: WorkloadRef) -> None:
        """Remove every object of the app, its address included."""
        ...

    def observe_app(self, *, ref: WorkloadRef) -> ObservedWorkload:
        """What this app looks like now (`replicas`: ready and wanted)."""
        ...

    def observe_all(self, *, namespace: str | None = None) -> list[ObservedWorkload]:
        """Every workload this backend knows of (the periodic sweep); one entry per run."""
        ...

    def stop_orphan(self, *, ref: WorkloadRef) -> bool:
        """Stop a run of this install that no row names (an orphan): what holds the nodes
        goes, its workspace stays. True when a workspace is left for `delete_orphan`."""
        ...

    def delete_orphan(self, *, ref: WorkloadRef) -> None:
        """Remove what is left of an orphan run of this install, its workspace included."""
        ...

    def watch(
        self, *, stop: threading.Event, namespace: str | None = None, resync_s: float = 300.0
    ) -> Iterator[ObservedWorkload]:
        """Yield an observation each time a workload changes, until `stop` is set.

        Level-triggered: after a (re)connection every known workload is yielded again, so a
        consumer must treat observations as idempotent.
        """
        ...
