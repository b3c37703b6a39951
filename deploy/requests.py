"""What the panel asks of `deploy/`: the kinds, flavors and run refs, and the requests.

The panel builds requests (`JobRequest`, `NotebookRequest`, `AppRequest`, `ProjectRequest`)
from its rows and hands them to a `ComputeBackend`. Everything here is frozen, hashable where
it can be, and free of Django and of the Kubernetes client. `deploy.types` re-exports every
name, with what the backends answer; import from either.

Every request and `WorkloadRef` carries an `install`: the id of the install the objects belong
to, which the manifests write as the `ajuste.io/install` label. The Kubernetes backend gives
each request it receives its own id, so the panel need not fill it in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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


def _tuplify(obj: object, *names: str) -> None:
    """Accept lists from callers but keep frozen requests hashable and immutable."""
    for name in names:
        object.__setattr__(obj, name, tuple(getattr(obj, name)))
