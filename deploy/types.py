"""Plain values that cross the line between the panel and `deploy/`.

The panel builds requests (`JobRequest`, `NotebookRequest`, `ProjectRequest`) from its rows and
hands them to a `ComputeBackend`; the backend answers with `ObservedWorkload`s and `LogChunk`s.
Everything here is frozen, hashable where it can be, and free of Django and of the Kubernetes
client, so the panel, the tests and the code running inside pods can all import it.

Every request and `WorkloadRef` carries an `install`: the id of the install the objects belong
to, which the manifests write as the `ajuste.io/install` label. The Kubernetes backend gives
each request it receives its own id, so the panel need not fill it in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from storage.datastore import DatastoreConfig
from storage.volumes import Mode, VolumeSpec

DEFAULT_JOB_TIMEOUT_S = 7 * 24 * 3600
GPU_RESOURCE_KEY = "nvidia.com/gpu"
# The name of the project Secret holding datastore credentials (a name, not a secret).
DATASTORE_SECRET_NAME = "ajuste-datastores"  # noqa: S105
# The project Secret holding the secrets its managers set, one key per secret name.
PROJECT_SECRETS_NAME = "ajuste-project-secrets"


class WorkloadKind(StrEnum):
    """What a workload is; also the value of the `ajuste.io/kind` label."""

    JOB = "job"
    NOTEBOOK = "notebook"
    APP = "app"


class Editor(StrEnum):
    """The editor a notebook serves on its port."""

    JUPYTERLAB = "jupyterlab"
    VSCODE = "vscode"


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
class Toleration:
    """One Kubernetes toleration of a flavor (`operator` Exists ignores `value`)."""

    key: str
    operator: str = "Exists"
    value: str | None = None
    effect: str | None = "NoSchedule"


@dataclass(frozen=True)
class FlavorSpec:
    """A flavor as the panel hands it over: what one unit is and where it may run.

    `gpus_per_unit` 0 is a CPU flavor. `node_selector` usually pins the GPU product
    (`nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3`).
    """

    name: str
    gpu_model: str
    gpus_per_unit: int
    vcpu_per_unit: int
    memory_gib_per_unit: int
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    resource_key: str = GPU_RESOURCE_KEY

    def __post_init__(self) -> None:
        _tuplify(self, "tolerations")


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
class WorkloadRef:
    """Identifies one run of one workload: enough to find, observe and delete its objects."""

    kind: WorkloadKind
    project: str
    namespace: str
    id: str
    run: int = 1
    # The install whose objects these are (`ajuste.io/install`); "" where none is known. The
    # Kubernetes backend fills in its own.
    install: str = ""


@dataclass(frozen=True)
class JobRequest:
    """One run of a training job, as the panel wants it.

    `id` is the panel's job id (any string; names are derived from it deterministically) and
    `run` counts re-runs of the same job, so each run gets fresh objects. `command` is an argv
    list, never run through a shell. `env` never carries S3 credentials: those live in the
    project's Secret named `datastore_secret` and reach only the sync containers.
    `sync_image` None means `deploy.images.SYNC_IMAGE`. `secret_env` maps env names to keys of
    the project's Secret `project_secrets` (the values the managers set): the request carries
    the names only, and the user's container reads them from that Secret (`secretKeyRef`).
    """

    id: str
    project: str
    namespace: str
    name: str
    image: str
    command: tuple[str, ...]
    flavor: FlavorSpec
    units: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    volumes: tuple[VolumeSpec, ...] = ()
    timeout_s: int = DEFAULT_JOB_TIMEOUT_S
    datastore_secret: str = DATASTORE_SECRET_NAME
    run: int = 1
    queue_name: str | None = None
    # Kueue's WorkloadPriorityClass (QUEUE_ENGINE=kueue); `preemptible` adds the pod failure
    # policy that ignores disruptions, so an evicted or drained pod never fails the job.
    priority_class: str | None = None
    preemptible: bool = False
    image_pull_secrets: tuple[str, ...] = ()
    workspace_gib: int = 50
    storage_class: str | None = None
    push_every_s: int = 300
    sync_image: str | None = None
    secret_env: Mapping[str, str] = field(default_factory=dict)
    project_secrets: str = PROJECT_SECRETS_NAME
    install: str = ""
    # Pods of `units` each, run together under torchrun: more than one is a JobSet.
    nodes: int = 1

    def __post_init__(self) -> None:
        _tuplify(self, "command", "volumes", "image_pull_secrets")

    @property
    def ref(self) -> WorkloadRef:
        return WorkloadRef(
            WorkloadKind.JOB, self.project, self.namespace, self.id, self.run, self.install
        )

    @property
    def pushed_volumes(self) -> tuple[VolumeSpec, ...]:
        """The rw/rwd volumes: the ones pushed back at the end."""
        return tuple(v for v in self.volumes if v.mode in (Mode.RW, Mode.RWD))


@dataclass(frozen=True)
class _OneName:
    """The fields every one-name server's request starts with, in this order."""

    id: str
    project: str
    namespace: str
    name: str
    image: str
    flavor: FlavorSpec


class ServerRequest(_OneName):
    """What a notebook's and an app's request share: one server under one name, served at
    `https://{host}{path}`. Not a dataclass itself: each kind's dataclass keeps its own fields
    after `_OneName`'s, in its own order; these annotations only name what the methods read."""

    kind: ClassVar[WorkloadKind]
    host: str
    path: str
    install: str
    command: tuple[str, ...] | None

    def __init_subclass__(cls, *, kind: WorkloadKind, **rest: object) -> None:
        super().__init_subclass__(**rest)
        cls.kind = kind

    def __post_init__(self) -> None:
        _tuplify(self, "volumes", "image_pull_secrets")
        if self.command is not None:
            _tuplify(self, "command")

    @property
    def ref(self) -> WorkloadRef:
        return WorkloadRef(self.kind, self.project, self.namespace, self.id, 1, self.install)

    @property
    def url(self) -> str:
        return f"https://{self.host}{self.path}"


@dataclass(frozen=True)
class NotebookRequest(ServerRequest, kind=WorkloadKind.NOTEBOOK):
    """A notebook as the panel wants it: `running` False keeps the workspace but no pod.

    It is served at `https://{host}{path}`, a host of its own under the panel's user-content
    domain, by the user-content gateway, which asks the panel before every request (members
    of the project only) and sends the request to the notebook's Service. `command` None
    means the editor's default. `token` is the editor's own token (JupyterLab requires it):
    the gateway sends it upstream in the `Authorization` header, so no browser ever holds it.
    """

    editor: Editor = Editor.JUPYTERLAB
    units: int = 1
    running: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    # env name -> name of a secret in the project's Secret `project_secrets` (`secret:<name>`)
    secret_env: Mapping[str, str] = field(default_factory=dict)
    project_secrets: str = PROJECT_SECRETS_NAME
    labels: Mapping[str, str] = field(default_factory=dict)
    volumes: tuple[VolumeSpec, ...] = ()
    workspace_gib: int = 20
    storage_class: str | None = None
    host: str = "nb.usercontent.ajuste.local"
    path: str = "/"
    datastore_secret: str = DATASTORE_SECRET_NAME
    image_pull_secrets: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    push_every_s: int = 300
    sync_image: str | None = None
    token: str = ""
    install: str = ""
    # Kueue (QUEUE_ENGINE=kueue): the project's LocalQueue and the interactive priority class,
    # on the StatefulSet, so the notebook's pod counts against its project's ClusterQueue.
    queue_name: str | None = None
    priority_class: str | None = None

    @property
    def pushed_volumes(self) -> tuple[VolumeSpec, ...]:
        """The rw/rwd volumes: pushed periodically and when the notebook stops."""
        return tuple(v for v in self.volumes if v.mode in (Mode.RW, Mode.RWD))


# Where KEDA asks Prometheus for an app's request rate (ingress-nginx's metrics).
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
# Where an app's weights are pulled to (read-only) before its server starts.
APP_MODEL_PATH = "/workspace/model"
APP_ADAPTER_PATH = "/workspace/adapter"


@dataclass(frozen=True)
class Scaling:
    """How many replicas an app runs: `min_replicas == max_replicas` with no target is a
    fixed count; otherwise an autoscaler keeps the average CPU (`target_cpu`, percent of the
    request) or requests per second per replica (`target_rps`) near its target, between the
    bounds. `min_replicas` 0 (scale to zero) needs KEDA on a cluster."""

    min_replicas: int = 1
    max_replicas: int = 1
    target_cpu: int | None = None
    target_rps: float | None = None

    @property
    def fixed(self) -> bool:
        return self.target_cpu is None and self.target_rps is None


@dataclass(frozen=True)
class AppRequest(ServerRequest, kind=WorkloadKind.APP):
    """An app as the panel wants it: `running` False keeps nothing running but its address.

    The model is pulled from `model` (a base model, or a merged one) to APP_MODEL_PATH and the
    optional `adapter` (a peft LoRA) to APP_ADAPTER_PATH by the sync init container, with the
    read-only `volumes`; the server (`image`, vLLM with `--enable-lora` by default; `command`
    None means the image's) answers the OpenAI API on `port`, ready when `probe_path` does.
    It is served at `https://{host}{path}`, a host of its own under the panel's user-content
    domain, by the user-content gateway, which asks the panel before every request (a project
    API token, unless `public`) and sends the request to the app's Service.
    `served_name` is the model's id in the API. `prometheus_url` is where KEDA (`keda`) reads
    the request rate that scales the app (and wakes it from zero).
    """

    model: VolumeSpec
    served_name: str
    adapter: VolumeSpec | None = None
    units: int = 1
    running: bool = True
    scaling: Scaling = field(default_factory=Scaling)
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: Mapping[str, str] = field(default_factory=dict)
    project_secrets: str = PROJECT_SECRETS_NAME
    labels: Mapping[str, str] = field(default_factory=dict)
    volumes: tuple[VolumeSpec, ...] = ()
    probe_path: str = "/health"
    port: int = 8000
    command: tuple[str, ...] | None = None
    public: bool = False
    keda: bool = False
    host: str = "app.usercontent.ajuste.local"
    path: str = "/"
    datastore_secret: str = DATASTORE_SECRET_NAME
    image_pull_secrets: tuple[str, ...] = ()
    sync_image: str | None = None
    model_gib: int = 20
    prometheus_url: str = DEFAULT_PROMETHEUS_URL
    install: str = ""
    # Kueue (QUEUE_ENGINE=kueue): the project's LocalQueue and the interactive priority class,
    # on the Deployment and its pod template, so each pod counts against its ClusterQueue.
    queue_name: str | None = None
    priority_class: str | None = None

    @property
    def pulled_volumes(self) -> tuple[VolumeSpec, ...]:
        """Everything the init container pulls: the weights first, then the volumes."""
        weights = (self.model,) if self.adapter is None else (self.model, self.adapter)
        return (*weights, *self.volumes)


@dataclass(frozen=True)
class EgressRule:
    """One allowed egress destination of a project's pods (the S3 endpoint, a proxy...).

    Give `cidr` for an address block, or `namespace` (and optionally `pod_labels`) for a
    service inside the cluster; `ports` empty means every port.
    """

    cidr: str | None = None
    namespace: str | None = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    ports: tuple[int, ...] = ()


# The resolvers of most clusters: the CoreDNS/kube-dns pods (`KUBERNETES_DNS` names others).
CLUSTER_DNS = EgressRule(namespace="kube-system", pod_labels={"k8s-app": "kube-dns"})


@dataclass(frozen=True)
class ProjectRequest:
    """A project's namespace and its guard rails.

    `datastores` become the project's Secret (key names from `DatastoreConfig.to_files`);
    `egress` lists what pods may reach besides DNS (at least the S3 endpoints); `dns` the
    resolvers they may ask (port 53 nowhere else); `private_allowed` the private and
    link-local blocks a wide egress rule may still reach (see `deploy.egress`).
    `panel_namespace` is where the panel runs: its user-content gateway's pods alone reach
    notebooks and apps, and its web pods reach apps too ("Try it").
    `gpu_quota` GPUs at most; the CPU (vCPU), memory (GiB), pod and storage (GiB) quotas
    likewise, 0 meaning no limit. `mig_resources` are the MIG profiles flavors ask for
    (`nvidia.com/mig-1g.10gb`): each is held to `gpu_quota` slices too. `secrets` (name →
    value, set by the project's managers) become the Secret `project_secrets`, which jobs
    reference by key; never in a repr.
    """

    slug: str
    namespace: str
    gpu_quota: int
    datastores: tuple[DatastoreConfig, ...] = ()
    egress: tuple[EgressRule, ...] = ()
    datastore_secret: str = DATASTORE_SECRET_NAME
    panel_namespace: str = "ajuste"
    gpu_resource_key: str = GPU_RESOURCE_KEY
    default_cpu: str = "500m"
    default_memory: str = "1Gi"
    dns: tuple[EgressRule, ...] = (CLUSTER_DNS,)
    private_allowed: tuple[str, ...] = ()
    cpu_quota: int = 0
    memory_gib_quota: int = 0
    pod_quota: int = 0
    storage_gib_quota: int = 0
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    project_secrets: str = PROJECT_SECRETS_NAME
    mig_resources: tuple[str, ...] = ()
    install: str = ""

    def __post_init__(self) -> None:
        _tuplify(self, "datastores", "egress", "dns", "private_allowed", "mig_resources")


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


def _tuplify(obj: object, *names: str) -> None:
    """Accept lists from callers but keep frozen requests hashable and immutable."""
    for name in names:
        object.__setattr__(obj, name, tuple(getattr(obj, name)))


class DeployError(Exception):
    """A request `deploy/` cannot carry out; the message is meant for the user."""


class TransientError(DeployError):
    """The cluster (or this machine) did not answer as expected this time: retry later."""


class ConflictError(DeployError):
    """An object with our deterministic name exists but is not ours to adopt."""
