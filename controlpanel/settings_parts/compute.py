"""Where workloads run: the compute backend, the queue engine, the local backend's limits, the
Kubernetes backend (namespaces, images, egress, workspaces) and served apps' addresses."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from controlpanel.env import env_bool, env_choice, env_int, env_list, env_str
from controlpanel.settings_parts.site import VAR_DIR
from deploy import images
from deploy.egress import parse_cidrs, parse_dns, parse_egress, parse_node_local_dns

__all__ = [
    "AJUSTE_FINETUNE_IMAGE",
    "AJUSTE_IMAGE_MAP",
    "AJUSTE_LOCAL_BACKEND_TRUSTED",
    "AJUSTE_LOCAL_CPUS",
    "AJUSTE_LOCAL_MEMORY_GIB",
    "AJUSTE_SYNC_IMAGE",
    "APP_KEDA",
    "APP_MODEL_GIB",
    "APP_PROMETHEUS_URL",
    "APP_SERVICE_URL",
    "COMPUTE_BACKEND",
    "JOB_WORKSPACE_GIB",
    "KUBERNETES_API_HOST",
    "KUBERNETES_DNS",
    "KUBERNETES_EGRESS",
    "KUBERNETES_EGRESS_ALLOW_PRIVATE",
    "KUBERNETES_EGRESS_FROM_DATASTORES",
    "KUBERNETES_IMAGE_PULL_SECRETS",
    "KUBERNETES_NAMESPACE",
    "KUBERNETES_NAMESPACED",
    "KUBERNETES_NODE_LOCAL_DNS",
    "KUBERNETES_PANEL_URL",
    "KUBERNETES_REQUEST_TIMEOUT_SECONDS",
    "KUBERNETES_SERVICE_ACCOUNT",
    "KUBERNETES_STORAGE_CLASS",
    "MAX_GPUS_PER_JOB",
    "MAX_NODES_PER_JOB",
    "NOTEBOOK_WORKSPACE_GIB",
    "QUEUES_OBSERVE_SECONDS",
    "QUEUES_RECONCILE_SECONDS",
    "QUEUE_ENGINE",
    "QUEUE_MAX_EVICTIONS",
    "TRY_IT_DEADLINE_SECONDS",
    "TRY_IT_PER_USER",
    "WORKER_HEARTBEAT_FILE",
    "WORKER_HEARTBEAT_SECONDS",
]

COMPUTE_BACKEND = env_choice("COMPUTE_BACKEND", "local", ("local", "kubernetes"))
# Who queues the work: the panel's own admission (`builtin`: per-project quotas, first in first
# out), or Kueue (`kueue`, a cluster with Kueue v0.19.2 installed: one ClusterQueue per project
# in a cohort, borrowing, priorities, preemption; controlpanel/queues). Kueue needs kubernetes
# (system check ajuste.E120).
QUEUE_ENGINE = env_choice("QUEUE_ENGINE", "builtin", ("builtin", "kueue"))
# How often beat reconciles Kueue's configuration (also after each project or flavor change).
QUEUES_RECONCILE_SECONDS = env_int("QUEUES_RECONCILE_SECONDS", 600, minimum=10)
# How often beat asks Kueue where waiting work stands (the visibility API, once per project
# with waiting work) and reads the ClusterQueues' usage for the capacity view.
QUEUES_OBSERVE_SECONDS = env_int("QUEUES_OBSERVE_SECONDS", 10, minimum=1)
# With Kueue: how many times one run of a job may be evicted (preempted) and requeued; the next
# eviction fails it with the reason, so a job that keeps losing its GPUs does not wait forever.
QUEUE_MAX_EVICTIONS = env_int("QUEUE_MAX_EVICTIONS", 10, minimum=0)
# The local backend runs workloads as this machine's user: a server reachable by other host
# names than loopback, or with more than one active user, refuses to start with it unless the
# operator accepts one trust domain (controlpanel/engine/checks.py).
AJUSTE_LOCAL_BACKEND_TRUSTED = env_bool("AJUSTE_LOCAL_BACKEND_TRUSTED", False)
# What the local backend's jobs may use at once, all projects together (0: this machine's
# cores and memory, detected); lower them in a container whose limits are below the machine's.
AJUSTE_LOCAL_CPUS = env_int("AJUSTE_LOCAL_CPUS", 0, minimum=0)
AJUSTE_LOCAL_MEMORY_GIB = env_int("AJUSTE_LOCAL_MEMORY_GIB", 0, minimum=0)

# Workloads. The Kubernetes backend uses in-cluster config, else KUBECONFIG; KUBERNETES_API_HOST
# names an API server directly (`kubectl proxy`, which adds the credentials: none are sent).
KUBERNETES_API_HOST = env_str("KUBERNETES_API_HOST") or None
KUBERNETES_SERVICE_ACCOUNT = env_str("KUBERNETES_SERVICE_ACCOUNT") or "ajuste-controller"
KUBERNETES_NAMESPACE = env_str("KUBERNETES_NAMESPACE") or "ajuste"
# Where the cluster reaches the panel's web Service (notebook and app forward-auth): derived
# from the namespace the panel runs in unless given (another Service name, an external URL).
KUBERNETES_PANEL_URL = (
    env_str("KUBERNETES_PANEL_URL") or f"http://ajuste-web.{KUBERNETES_NAMESPACE}.svc.cluster.local"
).rstrip("/")
if (
    urlsplit(KUBERNETES_PANEL_URL).scheme not in ("http", "https")
    or not urlsplit(KUBERNETES_PANEL_URL).hostname
):
    raise ImproperlyConfigured("KUBERNETES_PANEL_URL: an http:// or https:// URL with a host")
# Read pods and workloads one project namespace at a time (clusters that grant no cluster-wide
# reads; k8s/components/namespaced gives the RBAC): the sweep lists each project namespace.
KUBERNETES_NAMESPACED = env_bool("KUBERNETES_NAMESPACED", False)
# Images a kustomize overlay moved (deploy.images.MOVABLE: the serving and editors' images):
# a workload asking for the default runs the moved one.
AJUSTE_IMAGE_MAP = images.moved_images({name: env_str(name) or "" for name in images.MOVABLE})
# One API call (connect aside) waits this long for its answer, then is retried (deploy/kubernetes/
# api.py): a hung API server holds a worker thread for minutes at most, not forever.
KUBERNETES_REQUEST_TIMEOUT_SECONDS = env_int("KUBERNETES_REQUEST_TIMEOUT_SECONDS", 30, minimum=1)
AJUSTE_FINETUNE_IMAGE = env_str("AJUSTE_FINETUNE_IMAGE") or images.FINETUNE_IMAGE
AJUSTE_SYNC_IMAGE = env_str("AJUSTE_SYNC_IMAGE") or None
MAX_GPUS_PER_JOB = env_int("MAX_GPUS_PER_JOB", 4, minimum=1)
# A job's `nodes` (pods of MAX_GPUS_PER_JOB GPUs at most each) run together under torchrun.
MAX_NODES_PER_JOB = env_int("MAX_NODES_PER_JOB", 8, minimum=1)
# The Celery worker touches this file every WORKER_HEARTBEAT_SECONDS from its own thread; the
# liveness probe checks it without the broker (controlpanel/core/heartbeat.py). Empty: off.
WORKER_HEARTBEAT_FILE = env_str("WORKER_HEARTBEAT_FILE", str(VAR_DIR / "worker-heartbeat"))
WORKER_HEARTBEAT_SECONDS = env_int("WORKER_HEARTBEAT_SECONDS", 15, minimum=1)
# What project pods may reach besides DNS (their namespaces deny egress by default): the
# datastores' endpoints unless KUBERNETES_EGRESS_FROM_DATASTORES=0, plus KUBERNETES_EGRESS
# (`CIDR[:PORT]` or `namespace/NAME[:PORT]`, comma-separated). See deploy/egress.py.
try:
    KUBERNETES_EGRESS = parse_egress(env_str("KUBERNETES_EGRESS") or "")
except ValueError as exc:
    raise ImproperlyConfigured(f"KUBERNETES_EGRESS: {exc}") from None
KUBERNETES_EGRESS_FROM_DATASTORES = env_bool("KUBERNETES_EGRESS_FROM_DATASTORES", True)
# DNS goes only to these resolvers (`NAMESPACE/LABEL=VALUE`, `NAMESPACE` or CIDRs) and to a
# node-local cache's address; wide egress rules leave out the private and link-local ranges
# but those KUBERNETES_EGRESS_ALLOW_PRIVATE lists (CIDRs). See deploy/egress.py.
try:
    KUBERNETES_DNS = parse_dns(env_str("KUBERNETES_DNS") or "kube-system/k8s-app=kube-dns")
except ValueError as exc:
    raise ImproperlyConfigured(f"KUBERNETES_DNS: {exc}") from None
try:
    KUBERNETES_NODE_LOCAL_DNS = parse_node_local_dns(env_str("KUBERNETES_NODE_LOCAL_DNS") or "")
except ValueError as exc:
    raise ImproperlyConfigured(f"KUBERNETES_NODE_LOCAL_DNS: {exc}") from None
try:
    KUBERNETES_EGRESS_ALLOW_PRIVATE = parse_cidrs(env_str("KUBERNETES_EGRESS_ALLOW_PRIVATE") or "")
except ValueError as exc:
    raise ImproperlyConfigured(f"KUBERNETES_EGRESS_ALLOW_PRIVATE: {exc}") from None
KUBERNETES_IMAGE_PULL_SECRETS = tuple(env_list("KUBERNETES_IMAGE_PULL_SECRETS", []))
KUBERNETES_STORAGE_CLASS = env_str("KUBERNETES_STORAGE_CLASS") or None
JOB_WORKSPACE_GIB = env_int("JOB_WORKSPACE_GIB", 50, minimum=1)
# The workspace claim of a notebook on a cluster (GiB).
NOTEBOOK_WORKSPACE_GIB = env_int("NOTEBOOK_WORKSPACE_GIB", 20, minimum=1)
# APP_KEDA: KEDA is installed, so autoscaled apps use a ScaledObject (scale to zero).
APP_KEDA = env_bool("APP_KEDA", False)
# Where the panel's "Try it" reaches an app, and the user-content gateway a notebook or an app,
# on a cluster: its Service, inside the cluster ({service}, {namespace} and {port} are filled
# in; the project's network policy lets the gateway's pods, and the web pods to apps, through).
APP_SERVICE_URL = (
    env_str("APP_SERVICE_URL") or "http://{service}.{namespace}.svc.cluster.local:{port}"
).rstrip("/")
try:
    _service_url = urlsplit(APP_SERVICE_URL.format(service="s", namespace="n", port=80))
except (KeyError, IndexError, ValueError) as exc:
    raise ImproperlyConfigured(
        f"APP_SERVICE_URL: only {{service}}, {{namespace}} and {{port}} may be filled in ({exc!r})"
    ) from None
if _service_url.scheme not in ("http", "https") or not _service_url.hostname:
    raise ImproperlyConfigured("APP_SERVICE_URL: an http:// or https:// URL with a host")
# "Try it" (controlpanel/served/try_guard.py): a try ends this many seconds after the click,
# answered or not, and a person has at most TRY_IT_PER_USER tries open at once.
TRY_IT_DEADLINE_SECONDS = env_int("TRY_IT_DEADLINE_SECONDS", 60, minimum=1)
TRY_IT_PER_USER = env_int("TRY_IT_PER_USER", 2, minimum=1)
APP_MODEL_GIB = env_int("APP_MODEL_GIB", 20, minimum=1)
# Where KEDA reads an app's request rate (the panel's ajuste_app_requests_total, scraped).
APP_PROMETHEUS_URL = (
    env_str("APP_PROMETHEUS_URL") or "http://prometheus-operated.monitoring.svc:9090"
)
