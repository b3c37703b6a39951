"""Writing audit events: the request they come from (user, client address, request id) and the
rule that details never carry a secret."""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.core.signals import request_finished
from django.db import models
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from controlpanel.audit.models import AuditEvent

logger = logging.getLogger(__name__)

ACTION = re.compile(r"[a-z][a-z_]*(\.[a-z][a-z_]*)+")
# A detail whose key names one of these is dropped, whatever its value: token values, passwords,
# webhook secrets and keys never reach the log.
SECRET_KEY_PARTS = ("secret", "password", "passwd", "token", "credential", "digest")
SECRET_KEYS = frozenset({"key", "raw", "value"})
MAX_DETAIL_CHARS = 500

REQUEST: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)


class AuditRequestMiddleware:
    """Remembers the request being served, so that services that are handed only a project
    access still log who acted, from which address, under which request id."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = REQUEST.set(request)
        try:
            return self.get_response(request)
        finally:
            REQUEST.reset(token)


@receiver(request_finished)
def _forget_request(**kwargs: Any) -> None:
    REQUEST.set(None)


def _client_ip(request: HttpRequest) -> str | None:
    path = getattr(settings, "AXES_CLIENT_IP_CALLABLE", None)
    ip = import_string(path)(request) if path else request.META.get("REMOTE_ADDR")
    try:
        return str(ipaddress.ip_address(ip)) if ip else None
    except ValueError:
        return None


def _request_id(request: HttpRequest | None) -> str:
    value = getattr(request, "request_id", None) if request is not None else None
    if value:
        return str(value)[:128]
    try:  # the request id of the task that runs now, when controlpanel/core/requestid.py is there
        from controlpanel.core.requestid import current_request_id
    except ImportError:  # pragma: no cover - the module is part of the project today
        return ""
    return (current_request_id() or "")[:128]


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    return lowered in SECRET_KEYS or any(part in lowered for part in SECRET_KEY_PARTS)


def _clean_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_clean_value(item) for item in value][:50]
    if isinstance(value, models.Model):
        return str(value.pk)
    return str(value)[:MAX_DETAIL_CHARS]


def clean_details(details: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in details.items():
        if _is_secret(key):
            logger.warning("audit: detail %r dropped (it may hold a secret)", key)
            continue
        kept[key] = _clean_value(value)
    return kept


def _target(target: Any) -> tuple[str, str]:
    if target is None:
        return "", ""
    if isinstance(target, models.Model):
        return target._meta.model_name or "", str(target.pk)
    kind, ident = target
    return str(kind)[:64], str(ident)[:64]


def record(
    action: str,
    *,
    actor: Any,
    project: Any,
    target: Any,
    details: dict[str, Any],
    request: HttpRequest | None = None,
) -> AuditEvent:
    if not ACTION.fullmatch(action) or len(action) > 64:
        raise ValueError(f"audit action {action!r} is not a short dotted name")
    request = request if request is not None else REQUEST.get()
    if actor is None and request is not None:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            actor = user
    username = ""
    if actor is not None:
        username = actor.get_username() if hasattr(actor, "get_username") else str(actor)
    if actor is not None and not isinstance(actor, models.Model):
        actor = None
    target_type, target_id = _target(target)
    return AuditEvent.objects.create(
        actor=actor,
        actor_username=username[:150],
        action=action,
        project=project,
        project_slug=project.slug if project is not None else "",
        target_type=target_type,
        target_id=target_id,
        details=clean_details(details),
        ip=_client_ip(request) if request is not None else None,
        request_id=_request_id(request),
    )
