"""Log-ins into the audit log, from Django's signals (passwords and single sign-on alike)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from controlpanel.audit.log import record


@receiver(user_logged_in, dispatch_uid="audit-login")
def _logged_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    record("auth.login", actor=user, project=None, target=None, details={}, request=request)


@receiver(user_login_failed, dispatch_uid="audit-login-failed")
def _login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    # Only the name tried: the credentials' other entries (the password) never reach the log.
    tried = str(credentials.get("username") or "")[:150]
    record(
        "auth.login_failed",
        actor=None,
        project=None,
        target=None,
        details={"username": tried},
        request=request,
    )
