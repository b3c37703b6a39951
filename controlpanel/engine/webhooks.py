"""A project's webhook, for every sender (a job's end, a budget alert): a POST of signed JSON
(`X-Ajuste-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the project's webhook
secret>`). Every webhook is signed: a project with a URL and no secret gets one first
(managers see it on the project page). It goes only to a public address, vetted when it is
sent (controlpanel/core/public_http.py); the senders' tasks retry it (`webhook_retry_delay`)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from controlpanel.core import public_http
from controlpanel.projects.models import Project, validate_webhook_url
from controlpanel.projects.services import project_webhook_secret_ensure

log = logging.getLogger(__name__)
WEBHOOK_RETRY_MAX_S = 60.0


def webhook_retry_delay(retries: int) -> float:
    """Seconds before retry number `retries` + 1 of a webhook (or a notice's e-mail): doubling
    from WEBHOOK_RETRY_BASE_MS up to a minute, the second half of it random (receivers that
    were down are not hit all at once)."""

    ceiling = min(WEBHOOK_RETRY_MAX_S, settings.WEBHOOK_RETRY_BASE_MS / 1000 * 2**retries)
    return random.uniform(ceiling / 2, ceiling)  # noqa: S311 (jitter, not a secret)


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


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
