"""A request id that follows a request into its log lines and into the Celery tasks it sends.

The ingress's `X-Request-ID` is kept when it is a sane token (ingress-nginx sends 32 hex
digits), else a uuid4 hex is made; the response carries it back. It lives in a context
variable: every log record gets it as `request_id` ("-" outside a request),
`before_task_publish` adds it to the headers of every task sent meanwhile, and the worker sets
it from those headers for the task's run (`task_prerun`/`task_postrun`), so a task's lines and
the tasks it sends in turn carry the request's id.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any

from celery.signals import before_task_publish, task_postrun, task_prerun
from django.core.signals import request_finished
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

HEADER = "X-Request-ID"
TASK_HEADER = "request_id"  # the Celery message header (protocol 2: task.request.request_id)
# Letters, digits and `._:-`, 8 to 128 of them: what ingresses and tracers send; anything else
# (newlines, spaces, quotes, a 500-character blob) would forge or bloat log lines.
_SANE = re.compile(r"[A-Za-z0-9._:-]{8,128}")

REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)
_task_tokens: dict[str, Token[str | None]] = {}  # task id -> how to restore the id after it


def request_id_from(value: str | None) -> str:
    """The ingress's id when it is a sane token, else a new one."""
    if value and _SANE.fullmatch(value):
        return value
    return uuid.uuid4().hex


def current_request_id() -> str | None:
    return REQUEST_ID.get()


class RequestIdMiddleware:
    """Sets the request id and answers it in `X-Request-ID`. It stays set until the response
    is closed (`request_finished`), not only until this middleware returns: Django logs a 4xx
    or 5xx answer ("Not Found: ...") after the middleware chain, and a streamed body is sent
    after it too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_from(request.headers.get(HEADER))
        request.request_id = request_id  # type: ignore[attr-defined]
        REQUEST_ID.set(request_id)
        response = self.get_response(request)
        response[HEADER] = request_id
        return response


@receiver(request_finished)
def _clear_after_response(**kwargs: Any) -> None:
    REQUEST_ID.set(None)


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to every record that passes (the handler's format prints it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get() or "-"
        return True


@before_task_publish.connect
def _add_to_task_headers(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    request_id = REQUEST_ID.get()
    if request_id and headers is not None:
        headers.setdefault(TASK_HEADER, request_id)


@task_prerun.connect
def _set_for_task(task_id: str | None = None, task: Any = None, **kwargs: Any) -> None:
    # Eager tasks (run inside the request) have no headers: they keep the request's id.
    sent = getattr(getattr(task, "request", None), TASK_HEADER, None)
    value = request_id_from(sent) if isinstance(sent, str) else REQUEST_ID.get()
    if task_id:
        _task_tokens[task_id] = REQUEST_ID.set(value)


@task_postrun.connect
def _clear_after_task(task_id: str | None = None, **kwargs: Any) -> None:
    token = _task_tokens.pop(task_id or "", None)
    if token is not None:
        try:
            REQUEST_ID.reset(token)
        except ValueError:  # set in another context (a pool that moved threads): forget it
            REQUEST_ID.set(None)


def _install_record_factory() -> None:
    """Every record gets `request_id` when it is made, whatever handler prints it (the worker's,
    gunicorn's, a test's); RequestIdFilter in LOGGING is a guard for records made elsewhere."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "adds_request_id", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.request_id = REQUEST_ID.get() or "-"
        return record

    factory.adds_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


_install_record_factory()
