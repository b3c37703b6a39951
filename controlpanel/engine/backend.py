"""The compute backend, built once per process from settings, and what every kind's request to
it shares: a run's name (`job_ref`), the project's namespace and credentials, the env's secrets
(plain values: deploy/ never sees a model; each kind's driver builds its own request)."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict
from pathlib import Path
from typing import TypedDict

from django.conf import settings
from django.core.cache import cache

from controlpanel.core.install import install_id
from controlpanel.engine.datastores import project_datastores
from controlpanel.engine.models import Workload
from controlpanel.engine.validation import secret_reference
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.projects.selectors import secret_names, secret_values
from controlpanel.queues.selectors import namespace_cpu_memory_quotas, namespace_gpu_quota
from deploy.backend import ComputeBackend
from deploy.egress import egress_for_endpoint
from deploy.gpu_resources import mig_profile
from deploy.types import FlavorSpec, ProjectRequest, WorkloadKind, WorkloadRef

_lock = threading.Lock()
_backend: ComputeBackend | None = None


def get_backend() -> ComputeBackend:
    global _backend
    with _lock:
        if _backend is None:
            _backend = _build_backend()
        return _backend


def set_backend(backend: ComputeBackend | None) -> None:
    """Replace the process's backend (tests); None rebuilds it from settings on next use."""
    global _backend
    with _lock:
        _backend = backend


def _build_backend() -> ComputeBackend:
    if settings.COMPUTE_BACKEND == "kubernetes":
        # Deferred: the Kubernetes client is a heavy import that the local backend never needs.
        from deploy.kubernetes.backend import KubernetesBackend
        from deploy.kubernetes.client import make_api_client

        client = make_api_client(host=settings.KUBERNETES_API_HOST)
        return KubernetesBackend(
            api_client=client,
            service_account=settings.KUBERNETES_SERVICE_ACCOUNT,
            service_account_namespace=settings.KUBERNETES_NAMESPACE,
            request_timeout_s=float(settings.KUBERNETES_REQUEST_TIMEOUT_SECONDS),
            install_id=install_id(),  # ajuste.io/install on every object (controlpanel/core)
            namespaced=settings.KUBERNETES_NAMESPACED,
            images=settings.AJUSTE_IMAGE_MAP,
            log_read_deadline_s=float(settings.LOG_READ_DEADLINE_SECONDS),
            log_follow_idle_s=float(settings.LOG_FOLLOW_IDLE_SECONDS),
        )
    from deploy.local import LocalBackend  # deferred, as the Kubernetes one: one is used

    return LocalBackend(
        base_dir=Path(settings.VAR_DIR) / "workloads",
        cpus=settings.AJUSTE_LOCAL_CPUS,
        memory_gib=settings.AJUSTE_LOCAL_MEMORY_GIB,
    )


def ensure_project(project: Project) -> None:
    """Create or update the project's namespace, quota and datastore Secret when what they
    should hold changed (remembered in the cache, so a reconcile costs no extra API calls)."""
    request = project_request(project)
    digest = hashlib.sha256(json.dumps(asdict(request), sort_keys=True, default=str).encode())
    key = f"ajuste:project-ensured:{project.pk}:{digest.hexdigest()}:{get_backend().name}"
    if cache.get(key):
        return
    get_backend().ensure_project(project=request)
    cache.set(key, True, timeout=600)


def job_ref(job: Workload) -> WorkloadRef:
    """The backend's name for a workload row's current run (`Workload.backend_run`)."""
    return WorkloadRef(
        WorkloadKind(job.kind),
        job.project.slug,
        job.project.namespace,
        str(job.id),
        job.backend_run,
    )


def split_secret_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The job's env as typed → (plain values, env name → project secret name): a value
    `secret:<name>` becomes a reference, never text in the workload."""
    plain, secret = {}, {}
    for key, value in env.items():
        name = secret_reference(value)
        if name is None:
            plain[key] = value
        else:
            secret[key] = name
    return plain, secret


class RequestFields(TypedDict):
    """What every kind's request for deploy/ takes of its row alike (JobRequest, NotebookRequest
    and AppRequest name these fields the same): `**request_fields(row)` and the kind's own."""

    id: str
    project: str
    namespace: str
    name: str
    image: str
    flavor: FlavorSpec
    units: int
    env: dict[str, str]
    secret_env: dict[str, str]
    labels: dict[str, str]
    image_pull_secrets: tuple[str, ...]
    sync_image: str | None


def request_fields(workload: Workload) -> RequestFields:
    """The row's names, image, flavor, GPUs, env (secret references apart) and labels, and the
    install's image settings, as each request type takes them."""
    env, secret_env = split_secret_env(workload.env)
    return RequestFields(
        id=str(workload.id),
        project=workload.project.slug,
        namespace=workload.project.namespace,
        name=workload.name,
        image=workload.image,
        flavor=workload.flavor.to_spec(),
        units=workload.gpu,
        env=env,
        secret_env=secret_env,
        labels=dict(workload.labels),
        image_pull_secrets=settings.KUBERNETES_IMAGE_PULL_SECRETS,
        sync_image=settings.AJUSTE_SYNC_IMAGE,
    )


def missing_secrets(job: Workload) -> list[str]:
    """The project secrets the job's env references that the project no longer has."""
    wanted = set(split_secret_env(job.env)[1].values())
    return sorted(wanted - secret_names(project=job.project)) if wanted else []


def project_request(project: Project) -> ProjectRequest:
    datastores = tuple(project_datastores(project=project))
    egress = list(settings.KUBERNETES_EGRESS)
    if settings.KUBERNETES_EGRESS_FROM_DATASTORES:
        egress += [egress_for_endpoint(d.workload_endpoint_url) for d in datastores]
    cpu_quota, memory_gib_quota = namespace_cpu_memory_quotas(project)
    return ProjectRequest(
        slug=project.slug,
        namespace=project.namespace,
        gpu_quota=namespace_gpu_quota(project),
        cpu_quota=cpu_quota,
        memory_gib_quota=memory_gib_quota,
        pod_quota=project.pod_quota,
        storage_gib_quota=project.storage_gib_quota,
        datastores=datastores,
        egress=tuple(rule for i, rule in enumerate(egress) if rule not in egress[:i]),
        panel_namespace=settings.KUBERNETES_NAMESPACE,
        dns=(*settings.KUBERNETES_DNS, *settings.KUBERNETES_NODE_LOCAL_DNS),
        private_allowed=settings.KUBERNETES_EGRESS_ALLOW_PRIVATE,
        secrets=secret_values(project=project),
        mig_resources=mig_resources(),
    )


def mig_resources() -> tuple[str, ...]:
    """The MIG profiles enabled flavors ask for (each gets a line in every project's quota)."""
    keys = Flavor.objects.filter(enabled=True).values_list("resource_key", flat=True)
    return tuple(sorted({key for key in keys if mig_profile(key)}))
