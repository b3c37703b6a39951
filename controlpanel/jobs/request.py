"""A job's run as deploy/ takes it: plain values, no model."""

from __future__ import annotations

from django.conf import settings

from controlpanel.engine.backend import request_fields
from controlpanel.engine.models import Workload
from controlpanel.jobs.presets import finetune_command
from controlpanel.queues.selectors import job_queue
from deploy.types import JobRequest


def job_request(job: Workload) -> JobRequest:
    """The job's current run as deploy/ takes it (plain values)."""
    command = finetune_command(params=job.params) if job.preset == "finetune" else job.command
    fields = request_fields(job)
    queue_name, priority_class, preemptible = job_queue(
        project=job.project, preemptible=job.preemptible
    )
    if job.preset == "finetune" and not job.params.get("base_model"):
        fields["env"].setdefault("HF_HUB_OFFLINE", "1")  # the model comes from a volume
    return JobRequest(
        **fields,
        command=tuple(command),
        nodes=job.nodes,
        volumes=job.volume_specs,
        timeout_s=job.timeout,
        run=job.run,
        queue_name=queue_name,
        priority_class=priority_class,
        preemptible=preemptible,
        workspace_gib=settings.JOB_WORKSPACE_GIB,
        storage_class=settings.KUBERNETES_STORAGE_CLASS,
    )
