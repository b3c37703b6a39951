"""The compute backend, built once per process from settings, and the translation of panel rows
into `deploy/` requests (plain values: deploy/ never sees a model)."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.urls import reverse

from controlpanel.engine.models import Workload
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from deploy.backend import ComputeBackend
from deploy.egress import egress_for_endpoint
from deploy.gpu_resources import mig_profile
from deploy.types import (
    AppRequest,
    Editor,
    JobRequest,
    NotebookRequest,
    ProjectRequest,
    WorkloadKind,
    WorkloadRef,
)

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
        from controlpanel.core.install import install_id
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
        )
    from deploy.local import LocalBackend

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


def notebook_request(notebook: Workload) -> NotebookRequest:
    from controlpanel.engine.notebook_auth import notebook_token

    env, secret_env = split_secret_env(notebook.env)
    return NotebookRequest(
        id=str(notebook.id),
        project=notebook.project.slug,
        namespace=notebook.project.namespace,
        name=notebook.name,
        image=notebook.image,
        flavor=notebook.flavor.to_spec(),
        editor=Editor(notebook.editor or Editor.JUPYTERLAB),
        units=notebook.gpu,
        running=not notebook.stop_requested,
        env=env,
        secret_env=secret_env,
        labels=dict(notebook.labels),
        volumes=notebook.volume_specs,
        workspace_gib=settings.NOTEBOOK_WORKSPACE_GIB,
        storage_class=settings.KUBERNETES_STORAGE_CLASS,
        host=settings.NOTEBOOK_HOST,
        path=notebook_path(notebook),
        auth_url=f"{settings.NOTEBOOK_AUTH_URL}/{notebook.id}",
        signin_url=f"{settings.SITE_URL}{reverse('login')}",
        tls_secret=settings.NOTEBOOK_TLS_SECRET or None,
        ingress_class=settings.NOTEBOOK_INGRESS_CLASS,
        image_pull_secrets=settings.KUBERNETES_IMAGE_PULL_SECRETS,
        sync_image=settings.AJUSTE_SYNC_IMAGE,
        token=notebook_token(notebook),
    )


def app_request(app: Workload) -> AppRequest:
    from controlpanel.engine.app_services import AppConfig, app_path

    config = AppConfig.of(app)
    env, secret_env = split_secret_env(app.env)
    weights = app.volume_specs
    adapter = weights[1] if config.adapter and len(weights) > 1 else None
    return AppRequest(
        id=str(app.id),
        project=app.project.slug,
        namespace=app.project.namespace,
        name=app.name,
        image=app.image,
        flavor=app.flavor.to_spec(),
        model=weights[0],
        adapter=adapter,
        served_name=config.model_name,
        units=app.gpu,
        running=not app.stop_requested,
        scaling=config.scaling,
        env=env,
        secret_env=secret_env,
        labels=dict(app.labels),
        volumes=weights[2 if adapter else 1 :],
        probe_path=config.probe_path,
        port=config.port,
        public=config.public,
        keda=settings.APP_KEDA,
        host=settings.APP_HOST,
        path=app_path(app),
        auth_url=f"{settings.APP_AUTH_URL}/{app.id}",
        tls_secret=settings.APP_TLS_SECRET or None,
        ingress_class=settings.APP_INGRESS_CLASS,
        image_pull_secrets=settings.KUBERNETES_IMAGE_PULL_SECRETS,
        sync_image=settings.AJUSTE_SYNC_IMAGE,
        model_gib=settings.APP_MODEL_GIB,
        prometheus_url=settings.APP_PROMETHEUS_URL,
    )


def notebook_path(notebook: Workload) -> str:
    """Where the notebook is served on NOTEBOOK_HOST: stable across stop and start."""
    return f"/nb/{notebook.project.slug}/{notebook.id}/"


def job_request(job: Workload) -> JobRequest:
    from controlpanel.engine.presets import finetune_command

    command = finetune_command(params=job.params) if job.preset == "finetune" else job.command
    env, secret_env = split_secret_env(job.env)
    if job.preset == "finetune" and not job.params.get("base_model"):
        env.setdefault("HF_HUB_OFFLINE", "1")  # the model comes from a volume
    return JobRequest(
        id=str(job.id),
        project=job.project.slug,
        namespace=job.project.namespace,
        name=job.name,
        image=job.image,
        command=tuple(command),
        flavor=job.flavor.to_spec(),
        units=job.gpu,
        env=env,
        secret_env=secret_env,
        labels=dict(job.labels),
        volumes=job.volume_specs,
        timeout_s=job.timeout,
        run=job.run,
        queue_name=job.project.kueue_queue or None,
        sync_image=settings.AJUSTE_SYNC_IMAGE,
        image_pull_secrets=settings.KUBERNETES_IMAGE_PULL_SECRETS,
        workspace_gib=settings.JOB_WORKSPACE_GIB,
        storage_class=settings.KUBERNETES_STORAGE_CLASS,
    )


def split_secret_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The job's env as typed → (plain values, env name → project secret name): a value
    `secret:<name>` becomes a reference, never text in the workload."""
    from controlpanel.engine.validation import secret_reference

    plain, secret = {}, {}
    for key, value in env.items():
        name = secret_reference(value)
        if name is None:
            plain[key] = value
        else:
            secret[key] = name
    return plain, secret


def missing_secrets(job: Workload) -> list[str]:
    """The project secrets the job's env references that the project no longer has."""
    from controlpanel.projects.selectors import secret_names

    wanted = set(split_secret_env(job.env)[1].values())
    return sorted(wanted - secret_names(project=job.project)) if wanted else []


def project_request(project: Project) -> ProjectRequest:
    from controlpanel.engine.datastores import project_datastores
    from controlpanel.projects.selectors import secret_values

    datastores = tuple(project_datastores(project=project))
    egress = list(settings.KUBERNETES_EGRESS)
    if settings.KUBERNETES_EGRESS_FROM_DATASTORES:
        egress += [egress_for_endpoint(d.workload_endpoint_url) for d in datastores]
    return ProjectRequest(
        slug=project.slug,
        namespace=project.namespace,
        gpu_quota=project.gpu_quota,
        cpu_quota=project.cpu_quota,
        memory_gib_quota=project.memory_gib_quota,
        pod_quota=project.pod_quota,
        storage_gib_quota=project.storage_gib_quota,
        datastores=datastores,
        egress=tuple(rule for i, rule in enumerate(egress) if rule not in egress[:i]),
        ingress_namespace=settings.KUBERNETES_INGRESS_NAMESPACE,
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
