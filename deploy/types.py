"""Plain values that cross the line between the panel and `deploy/`.

The panel builds requests (`JobRequest`, `NotebookRequest`, `ProjectRequest`: defined in
`deploy.requests`, re-exported here) from its rows and hands them to a `ComputeBackend`; the
backend answers with `ObservedWorkload`s and `LogChunk`s.
Everything here is frozen, hashable where it can be, and free of Django and of the Kubernetes
client, so the panel, the tests and the code running inside pods can all import it.

Every request and `WorkloadRef` carries an `install`: the id of the install the objects belong
to, which the manifests write as the `ajuste.io/install` label. The Kubernetes backend gives
each request it receives its own id, so the panel need not fill it in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

# The requests side lives in `deploy.requests`; its names stay importable from here.
from deploy.requests import (
    APP_ADAPTER_PATH,
    APP_MODEL_PATH,
    CLUSTER_DNS,
    DATASTORE_SECRET_NAME,
    DEFAULT_JOB_TIMEOUT_S,
    DEFAULT_PROMETHEUS_URL,
    GPU_RESOURCE_KEY,
    PROJECT_SECRETS_NAME,
    AppRequest,
    Editor,
    EgressRule,
    FlavorSpec,
    JobRequest,
    NotebookRequest,
    ProjectRequest,
    Scaling,
    ServerRequest,
    Toleration,
    WorkloadKind,
    WorkloadRef,
    _tuplify,
)

__all__ = [
    "APP_ADAPTER_PATH",
    "APP_MODEL_PATH",
    "CLUSTER_DNS",
    "DATASTORE_SECRET_NAME",
    "DEFAULT_JOB_TIMEOUT_S",
    "DEFAULT_PROMETHEUS_URL",
    "GPU_RESOURCE_KEY",
    "PROJECT_SECRETS_NAME",
    "AppRequest",
    "Capacity",
    "ClusterCapacity",
    "ConflictError",
    "DeployError",
    "Editor",
    "EgressRule",
    "FlavorSpec",
    "GpuPool",
    "JobRequest",
    "LogChunk",
    "NodeIssue",
    "NotebookRequest",
    "ObservedWorkload",
    "Phase",
    "ProjectRequest",
    "ReplicaRun",
    "Scaling",
    "ServerRequest",
    "Toleration",
    "TransientError",
    "WorkloadKind",
    "WorkloadRef",
]


class Phase(StrEnum):
    """What a backend observed; the panel maps each phase to its job or notebook state.

    - QUEUED: admitted by nothing yet: a Kueue-suspended Job (waiting for quota in Kueue).
    - INITIALIZING: the pod is on a node and its init container pulls the volumes.
    - PENDING: waiting for a node or for the image; `reason` quotes the scheduler or kubelet
      ("0/12 nodes are available: 12 Insufficient nvidia.com/gpu", "ImagePullBackOff: ...").
      The local backend also reports PENDING when this machine lacks the flavor's GPUs.
    - RUNNING: the user's container runs (billing counts from `started_at`).
    - STOPPING: a notebook is shutting down at our request.
    - FINALIZING: the user's process has ended; rw volumes are being pushed back. When
      `needs_apply` is set, the push has not been started yet: call `apply_job` again.
    - SUCCEEDED: exit code 0 and every rw volume pushed.
    - FAILED: non-zero exit (`exit_code`), a timeout (`timed_out`), or a failed volume pull.
    - STOPPED: ended at our request (job stop, notebook stop); rw volumes pushed.
    - SYNC_FAILED: the final push failed; the data is kept, `retry_push` tries again.
    - GONE: nothing of this workload exists any more (deleted, or never created).
    - ERROR: a platform fault (evicted pod, lost supervisor, unreadable state).
    """

    QUEUED = "QUEUED"
    INITIALIZING = "INITIALIZING"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    FINALIZING = "FINALIZING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    SYNC_FAILED = "SYNC_FAILED"
    GONE = "GONE"
    ERROR = "ERROR"

    @property
    def is_final(self) -> bool:
        """No further change happens without a call from the panel."""
        return self in _FINAL_PHASES


_FINAL_PHASES = frozenset(
    {Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED, Phase.SYNC_FAILED, Phase.GONE, Phase.ERROR}
)


@dataclass(frozen=True)
class Capacity:
    """What one machine can run at once: the local backend's cores and memory. The panel
    admits jobs only while their flavors' requests fit in it (a cluster queues by itself).
    `gpus`: the product name of each of its GPUs (none is an answer: a GPU flavor can never
    start there, and the panel refuses it at submit)."""

    millicpu: int
    memory_mib: int
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuPool:
    """The GPUs of one model: `total` on every node, `in_use` by running or bound pods (the
    local backend: by its live runs), `unavailable` the rest of those on nodes that take no
    new work (cordoned or not ready); `free` is what a new workload could get now. `resource`
    is what is counted: whole GPUs, or the slices of one MIG profile (`nvidia.com/mig-1g.10gb`),
    a pool of its own beside the model's whole GPUs."""

    model: str
    total: int
    in_use: int
    unavailable: int = 0
    nodes: int = 0
    resource: str = GPU_RESOURCE_KEY

    @property
    def free(self) -> int:
        return max(0, self.total - self.in_use - self.unavailable)


@dataclass(frozen=True)
class NodeIssue:
    """A node that takes no new work: cordoned (spec.unschedulable) and/or not Ready.
    `gpus` counts its whole GPUs, `mig_slices` its MIG slices of every profile."""

    name: str
    model: str
    gpus: int
    cordoned: bool
    ready: bool
    reason: str = ""
    mig_slices: int = 0


@dataclass(frozen=True)
class ClusterCapacity:
    """What the backend has to run on, read once: GPUs by model, CPU (millicores, allocatable
    and requested by live pods) and the nodes that take no new work. `nodes` counts every
    node (the local backend: 1, this machine)."""

    backend: str
    pools: tuple[GpuPool, ...] = ()
    millicpu: int = 0
    millicpu_in_use: int = 0
    memory_mib: int = 0
    nodes: int = 0
    issues: tuple[NodeIssue, ...] = ()

    def __post_init__(self) -> None:
        _tuplify(self, "pools", "issues")


@dataclass(frozen=True)
class ReplicaRun:
    """One replica of an app as billing sees it: a pod (`uid` its UID) or, locally, one
    start of the server (the supervisor's run id), from its server's first start to its end
    (`finished_at` None while it runs or may run again)."""

    uid: str
    started_at: datetime
    finished_at: datetime | None = None
    exit_code: int | None = None
    node: str | None = None
    # A pod being deleted (a JobSet's group restart, a scale-down) that has not ended yet:
    # when it will be gone at the latest (its deletionTimestamp: the deletion plus its grace
    # period). Kept with its run, so a pod that goes without its end seen is billed to here.
    ends_by: datetime | None = None


@dataclass(frozen=True)
class ObservedWorkload:
    """What a backend saw of one workload run, as plain values.

    `started_at`/`finished_at` are the user container's own start and end (billing meters
    from them); `run_uid` is the pod UID (one usage interval per pod run) or, locally, the
    supervisor's run id; an app's replicas are billed from `replica_runs` instead. `reason`
    is a human sentence for the state history. `push_attempt` counts final pushes started
    (retries included). `push_note` is what the final push has to say besides success (the
    keys it left alone as conflicts).
    `created_at` is when the newest object of the run was made (from `observe_all`, where
    the sweep's orphan collector counts its grace period from it; None when unknown).
    """

    kind: WorkloadKind
    id: str
    phase: Phase
    reason: str = ""
    project: str = ""
    namespace: str = ""
    run: int = 1
    run_uid: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    timed_out: bool = False
    needs_apply: bool = False
    push_attempt: int = 0
    node: str | None = None
    url: str | None = None
    push_note: str = ""
    created_at: datetime | None = None
    # A notebook server's last activity (requests, kernels, terminals), where the backend
    # can read it: the panel stops notebooks idle for longer than their project allows.
    last_activity: datetime | None = None
    # An app's replicas: (ready, wanted); None where the kind has none.
    replicas: tuple[int, int] | None = None
    # An app's replicas whose server has started, each billed as a run of its own: every one
    # the backend has, so a run missing from it has ended. None where the kind bills one run
    # per observation (`run_uid`).
    replica_runs: tuple[ReplicaRun, ...] | None = None
    # A QUEUED run that Kueue evicted: when (its Workload's Evicted condition). A pod of the
    # run that is gone without its end seen, never seen terminating, is metered to here.
    evicted_at: datetime | None = None
    # The `run_uid` pod is being deleted (evicted, stopped): when it will be gone at the
    # latest (its deletionTimestamp: the deletion plus its grace period), as `ReplicaRun`'s.
    ends_by: datetime | None = None
    # None of the run's objects carries an install label: made before install ids, so the
    # install whose database has its row adopts it, and no orphan sweep may delete it.
    unlabelled: bool = False

    @property
    def ref(self) -> WorkloadRef:
        return WorkloadRef(self.kind, self.project, self.namespace, self.id, self.run)


@dataclass(frozen=True)
class LogChunk:
    """New log lines since a cursor; pass `cursor` back to get the lines after these.

    `lines` have no trailing newline and no timestamp prefix. `eof` is set once the process
    has ended and every line has been returned. `skipped` says what the read had to pass over
    (too much at once to take): the collector stores it as a line of its own. `gap` says what
    was lost before `lines` (the log file rotated before they were read): stored before them.
    """

    lines: tuple[str, ...]
    cursor: str
    eof: bool = False
    skipped: str = ""
    gap: str = ""


class DeployError(Exception):
    """A request `deploy/` cannot carry out; the message is meant for the user."""


class TransientError(DeployError):
    """The cluster (or this machine) did not answer as expected this time: retry later."""


class ConflictError(DeployError):
    """An object with our deterministic name exists but is not ours to adopt."""
