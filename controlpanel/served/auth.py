"""Who may call an app: by default only the API tokens of its project's members
(`Authorization: Bearer <token>`, the same personal tokens as the REST API) and the project's
app-only tokens (served/app_tokens.py); anyone when a manager made it public. One rule
(`app_caller`), asked by controlpanel/served/usercontent.py for every request to the app's own
host (the user-content gateway's on a cluster, the panel's own
proxy under `make run`).

A token is never logged, never forwarded to the server (the gateway and the proxy send the
server no Authorization header of the caller's), and only its digest is looked up. Unknown apps,
and apps of a project the token's user is not in, answer alike (nothing is revealed).
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

import httpx

from controlpanel.accounts.models import APP_TOKEN_PREFIX
from controlpanel.accounts.services import token_authenticate
from controlpanel.projects.models import Membership
from controlpanel.served.app_tokens import app_token_authenticate
from controlpanel.served.config import Serving as AppConfig
from controlpanel.served.models import App


def app_caller(app: App | None, authorization: str) -> tuple[int, str]:
    """(200, "") when this caller may reach the app, else the status and why."""
    if app is None:
        return 404, "No such app."
    if AppConfig.of(app).public:
        return 200, ""
    scheme, _, raw = authorization.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return 401, "Send a project API token: Authorization: Bearer <token>."
    raw = raw.strip()
    if raw.startswith(APP_TOKEN_PREFIX):  # an app-only token: this project's apps, nothing else
        app_token = app_token_authenticate(raw=raw)
        if app_token is None:
            return 401, "Invalid or revoked token."
        return (200, "") if app_token.project_id == app.project_id else (404, "No such app.")
    token = token_authenticate(raw=raw)
    if token is None:
        return 401, "Invalid, expired or revoked token."
    # project_access's rule (a member, or a site admin), in one query: the app's project is
    # known, and this runs before every call to the app.
    user = token.user
    if (
        not user.is_staff
        and not Membership.objects.filter(project_id=app.project_id, user_id=user.pk).exists()
    ):
        return 404, "No such app."
    return 200, ""


_client_lock = threading.Lock()
_client: httpx.Client | None = None


def upstream_client() -> httpx.Client:
    """One pooled client per process for the panel's own calls to apps' servers ("Try it")."""
    global _client
    with _client_lock:
        if _client is None:
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
            timeout = httpx.Timeout(connect=5.0, read=300.0, write=60.0, pool=30.0)
            _client = httpx.Client(limits=limits, timeout=timeout, trust_env=False)
        return _client


def _loopback(url: str) -> bool:
    """The local backend's servers listen on 127.0.0.1: the panel calls nothing else there."""
    parts = urlsplit(url)
    return parts.scheme == "http" and parts.hostname == "127.0.0.1" and bool(parts.port)
