"""When a job reaches a final state: an e-mail to its owner and, if the project has one, its
webhook (signed JSON, controlpanel/engine/webhooks.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.urls import reverse

from controlpanel.engine.webhooks import post_project_webhook
from controlpanel.jobs.models import Job


def job_payload(job: Job) -> dict[str, Any]:
    url = settings.SITE_URL + reverse(
        "job-detail", kwargs={"slug": job.project.slug, "job_id": job.pk}
    )
    return {
        "event": "job.finished",
        "id": str(job.pk),
        "name": job.name,
        "project": job.project.slug,
        "run": job.run,
        "state": job.state,
        "state_reason": job.state_reason,
        "exit_code": job.exit_code,
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "url": url,
    }


def send_job_email(job: Job) -> None:
    if not job.owner.email:
        return
    payload = job_payload(job)
    send_mail(
        subject=f"[Ajuste] {job.name}: {job.state}",
        message=(
            f"Your job {job.name} in project {job.project.name} ended: {job.state}"
            f"{' — ' + job.state_reason if job.state_reason else ''}.\n\n{payload['url']}\n"
        ),
        from_email=None,
        recipient_list=[job.owner.email],
        fail_silently=False,
    )


def post_webhook(job: Job) -> None:
    """The job's end, to its project's webhook (see `post_project_webhook`)."""
    post_project_webhook(job.project, "job.finished", job_payload(job))
