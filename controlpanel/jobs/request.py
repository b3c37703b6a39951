"""A job's run as deploy/ takes it: plain values, no model."""

from __future__ import annotations

from django.conf import settings

from controlpanel.engine.backend import split_secret_env
from controlpanel.engine.models import Workload
from controlpanel.jobs.presets import finetune_command
from controlpanel.queues.selectors import job_queue
from deploy.types import JobRequest


def job_request(job: Workload) -> JobRequest:
    """The job's current run as deploy/ takes it (plain values)."""
    command = finetune_command(params=job.params) if job.preset == "finetune" else job.command
    env, secret_env = split_secret_env(job.env)
    queue_name, priority_class, preemptible = job_queue(
        project=job.project, preemptible=job.preemptible
    )
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
        nodes=job.nodes,
        env=env,
        secret_env=secret_env,
        labels=dict(job.labels),
        volumes=job.volume_specs,
        timeout_s=job.timeout,
        run=job.run,
        queue_name=queue_name,
        priority_class=priority_class,
        preemptible=preemptible,
        sync_image=settings.AJUSTE_SYNC_IMAGE,
        image_pull_secrets=settings.KUBERNETES_IMAGE_PULL_SECRETS,
        workspace_gib=settings.JOB_WORKSPACE_GIB,
        storage_class=settings.KUBERNETES_STORAGE_CLASS,
    )
