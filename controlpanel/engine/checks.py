"""The local backend runs jobs and notebooks as this machine's user, beside the panel's secret
key, database and every project's credentials: anyone who can launch one can read them. That
is acceptable only where every user is trusted alike (one person's `make run`). So a server
with COMPUTE_BACKEND=local refuses to start when it can be reached by another host name than
loopback, or when more than one active user exists, unless AJUSTE_LOCAL_BACKEND_TRUSTED=1 says
the operator accepts a single trust domain. Host names are checked by every management command
(runserver, migrate, the watcher...), users by migrate and `check --database default`, and
both at the start of gunicorn (wsgi.py) and Celery (celery.py)."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.checks import Error, Tags, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError

FIX = (
    "Set COMPUTE_BACKEND=kubernetes, or AJUSTE_LOCAL_BACKEND_TRUSTED=1 if every user of this "
    "panel may read its secrets (README: the local backend)."
)


def _loopback(host: str) -> bool:
    host = host.strip().lower().rstrip(".")
    if host in ("localhost", "[::1]") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _active_users() -> int | None:
    try:
        return get_user_model().objects.filter(is_active=True).count()
    except DatabaseError:  # not migrated yet (migrate runs the checks first)
        return None


def _applies() -> bool:
    return settings.COMPUTE_BACKEND == "local" and not settings.AJUSTE_LOCAL_BACKEND_TRUSTED


def _host_problems() -> list[str]:
    public = [host for host in settings.ALLOWED_HOSTS if not _loopback(host)]
    if not _applies() or not public:
        return []
    return [
        f"ALLOWED_HOSTS names {', '.join(public)}: the panel can be reached from other "
        "machines, whose users would run jobs as this machine's user"
    ]


def _user_problems() -> list[str]:
    users = _active_users() if _applies() else None
    if users is None or users <= 1:
        return []
    return [
        f"{users} active users: each could read the others' credentials and the panel's "
        "secrets through a job"
    ]


def local_backend_problems() -> list[str]:
    """Why this server may not run the local backend; empty when it may."""
    return _host_problems() + _user_problems()


def _errors(problems: list[str]) -> list[Error]:
    return [
        Error(f"COMPUTE_BACKEND=local with {problem}.", hint=FIX, id="ajuste.E001")
        for problem in problems
    ]


@register()
def local_backend_hosts_check(app_configs: Any, **kwargs: Any) -> list[Error]:
    return _errors(_host_problems())


# Tagged `database`: run by migrate, `check --database default`, and not by every management
# command (`apitoken` for a second user must still work); gunicorn and Celery check at start.
@register(Tags.database)
def local_backend_users_check(app_configs: Any, databases: Any = None, **kwargs: Any) -> list:
    return _errors(_user_problems()) if databases else []


def refuse_untrusted_local_backend() -> None:
    """For process starts that run no system checks (gunicorn, Celery)."""
    problems = local_backend_problems()
    if problems:
        raise ImproperlyConfigured(
            "COMPUTE_BACKEND=local with " + "; and ".join(problems) + ". " + FIX
        )
