"""When a job reaches a final state: an e-mail to its owner and, if the project has one, a
webhook POST of signed JSON (`X-Ajuste-Signature: sha256=<hex HMAC-SHA256 of the raw body,
keyed with the project's webhook secret>`). Every webhook is signed: a project with a URL and
no secret gets one first (managers see it on the project page). It goes only to a public
address, vetted when it is sent (controlpanel/core/public_http.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.urls import reverse

from controlpanel.core import public_http
from controlpanel.engine.models import Job
from controlpanel.projects.models import Project, validate_webhook_url
from controlpanel.projects.services import project_webhook_secret_ensure

log = logging.getLogger(__name__)


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


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


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


def post_project_webhook(project: Project, event: str, payload: dict[str, Any]) -> None:
    """POST `payload` as compact JSON to the project's webhook, signed, with
    `X-Ajuste-Event: <event>`. Raises on a non-2xx answer, or none within
    WEBHOOK_TIMEOUT_SECONDS (the whole request), so the task retries with backoff; a URL whose
    host is (or now resolves to) an address webhooks may not reach is logged and not retried."""
    if not project.webhook_url:
        return
    try:
        validate_webhook_url(project.webhook_url)  # one set in the admin skipped the form
    except ValidationError as exc:
        log.warning("project %s: webhook not sent: %s", project.slug, " ".join(exc.messages))
        return
    secret = project.webhook_secret or project_webhook_secret_ensure(project=project)
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Ajuste-Webhook/1",
        "X-Ajuste-Event": event,
        "X-Ajuste-Signature": sign(secret, body),
    }
    try:
        response = public_http.post(
            project.webhook_url,
            content=body,
            headers=headers,
            timeout=settings.WEBHOOK_TIMEOUT_SECONDS,
        )
    except public_http.AddressRefused as exc:
        log.warning("project %s: webhook not sent: %s", project.slug, exc)
        return
    response.raise_for_status()
