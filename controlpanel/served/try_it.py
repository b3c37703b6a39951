"""The "Try it" box of an app's page: one chat message from a signed-in member, sent by the
panel to the app's server as the user-content gateway would, the answer streamed
back as plain text. The browser never holds an API token: the session and the CSRF token are
the caller's credentials, checked by the view (`project_view`) before anything here runs.

On the local backend the panel reaches the app's server on 127.0.0.1; on a cluster, the app's
Service inside the cluster (`APP_SERVICE_URL`: `http://app-<id>.<namespace>.svc.cluster.local:80`),
which the project's network policy opens to the panel's web pods besides the user-content
gateway's. Either way the request carries no credential: the server sits behind the token
check (the gateway or the local proxy), and the member's session was checked here instead.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

from controlpanel.engine.backend import job_ref
from controlpanel.served.auth import _loopback, upstream_client
from controlpanel.served.config import SERVING
from controlpanel.served.config import Serving as AppConfig
from controlpanel.served.models import App
from controlpanel.served.try_guard import Guard, TryRefused
from deploy import names
from deploy.manifests.apps import SERVICE_PORT

MAX_MESSAGE = 4000
MAX_TOKENS = 1024
DEFAULT_TOKENS = 128
CUT_OFF = "\n[the answer was cut off: the app's server stopped sending]"
OUT_OF_TIME = "\n[the answer was cut off: Try it stops waiting after {seconds} s]"


@dataclass(frozen=True)
class TryRequest:
    """A valid "Try it" submission."""

    message: str
    max_tokens: int


def try_validate(data: Any) -> TryRequest:
    """The form's `message` and `max_tokens`, or TryRefused(400) naming the field."""
    message = str(data.get("message") or "").strip()
    if not message:
        raise TryRefused(400, "message: write something to send.")
    if len(message) > MAX_MESSAGE:
        raise TryRefused(400, f"message: at most {MAX_MESSAGE} characters.")
    raw = str(data.get("max_tokens") or DEFAULT_TOKENS).strip()
    try:
        max_tokens = int(raw)
    except ValueError:
        raise TryRefused(400, f"max_tokens: {raw[:20]!r} is not a whole number.") from None
    if not 1 <= max_tokens <= MAX_TOKENS:
        raise TryRefused(400, f"max_tokens: from 1 to {MAX_TOKENS}.")
    return TryRequest(message=message, max_tokens=max_tokens)


def server_url(app: App) -> str:
    """Where the panel reaches the app's server: its local process's loopback URL, or on a
    cluster its Service (APP_SERVICE_URL with the Service's name, namespace and port)."""
    if settings.COMPUTE_BACKEND == "local":
        if not _loopback(app.url):
            raise TryRefused(503, "The app's local server has no address yet: try again shortly.")
        return app.url
    service = names.app_name(job_ref(app))
    namespace = app.project.namespace
    return settings.APP_SERVICE_URL.format(service=service, namespace=namespace, port=SERVICE_PORT)


def try_open(*, app: App, ask: TryRequest, guard: Guard) -> httpx.Response:
    """Send one streamed chat completion to the app's server; its open answer (2xx), watched
    by `guard` (the try's deadline), or TryRefused saying why not (the app not serving, no
    server address, the server's refusal, the deadline). The caller gives the guard back."""
    if app.state not in SERVING:
        raise TryRefused(409, f"The app is {app.state}: start it, then try again once RUNNING.")
    base = server_url(app)
    body = {
        "model": AppConfig.of(app).model_name,
        "messages": [{"role": "user", "content": ask.message}],
        "max_tokens": ask.max_tokens,
        "stream": True,
    }
    client = upstream_client()
    url = f"{base}/v1/chat/completions"
    request = client.build_request("POST", url, json=body, timeout=guard.timeout())
    try:
        answer = client.send(request, stream=True)
    except httpx.TimeoutException:
        message = f"The app's server did not answer within {guard.seconds} s."
        raise TryRefused(504, message) from None
    except httpx.HTTPError:
        raise TryRefused(502, "The app's server did not answer.") from None
    guard.watch(answer)
    if answer.status_code >= 400:
        detail = _error_text(answer)
        raise TryRefused(502, f"The app's server answered {answer.status_code}: {detail}")
    return answer


def _error_text(answer: httpx.Response) -> str:
    try:
        answer.read()
        error = answer.json().get("error") or {}
        return str(error.get("message") or answer.reason_phrase)[:500]
    except (ValueError, AttributeError, httpx.HTTPError):
        return answer.reason_phrase
    finally:
        answer.close()


def try_text(answer: httpx.Response, guard: Guard) -> Generator[str, None, None]:
    """The answer's text as it comes: each server-sent event's `choices[0].delta.content`,
    until `data: [DONE]`; a line saying so when the stream breaks off before it, or when the
    try's deadline passes (the guard shuts the connection down then, even mid-read)."""
    try:
        for line in answer.iter_lines():
            if guard.passed:
                break
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            piece = _delta(data)
            if piece:
                yield piece
        yield OUT_OF_TIME.format(seconds=guard.seconds) if guard.passed else CUT_OFF
    except httpx.HTTPError:
        yield OUT_OF_TIME.format(seconds=guard.seconds) if guard.passed else CUT_OFF
    finally:
        answer.close()


class TryStream:
    """The streamed answer handed to Django: closing it (the response's close, even before a
    byte was read) closes the connection and gives the guard back."""

    def __init__(self, answer: httpx.Response, guard: Guard) -> None:
        self._answer, self._guard = answer, guard
        self._text = try_text(answer, guard)

    def __iter__(self) -> Iterator[str]:
        return self._text

    def close(self) -> None:
        self._text.close()
        self._answer.close()
        self._guard.done()


def _delta(data: str) -> str:
    try:
        event = json.loads(data)
        if event.get("error"):
            return f"\n[error: {event['error'].get('message', event['error'])}]"
        return str(event["choices"][0]["delta"].get("content") or "")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""
