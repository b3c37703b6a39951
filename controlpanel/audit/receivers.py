"""Log-ins into the audit log, from Django's signals (passwords and single sign-on alike), and
the edits made in Django's admin."""

from __future__ import annotations

from functools import wraps
from typing import Any, cast

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry, LogEntryManager
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from controlpanel.audit.log import record
from controlpanel.projects.models import Project


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


# --- the Django admin's edits --------------------------------------------------------------

ADMIN_ACTIONS = {ADDITION: "admin.add", CHANGE: "admin.change", DELETION: "admin.delete"}


def install_admin_hook() -> None:
    """Every add, change and delete made in Django's admin goes to the audit log as well. The
    admin writes its own log through `LogEntryManager.log_actions`, and several deletions at
    once with bulk_create, which sends no signal: that one method is wrapped (once), so no
    admin page and no model is missed."""
    original = LogEntryManager.log_actions
    if getattr(original, "audited", False):
        return

    @wraps(original)
    def log_actions(
        self: Any,
        user_id: Any,
        queryset: Any,
        action_flag: int,
        change_message: Any = "",
        *,
        single_object: bool = False,
    ) -> Any:
        objects = list(queryset)
        result = cast(Any, original)(  # either overload: single_object is passed through
            self, user_id, objects, action_flag, change_message, single_object=single_object
        )
        _record_admin(user_id, objects, [result] if single_object else list(result))
        return result

    log_actions.audited = True  # type: ignore[attr-defined]
    LogEntryManager.log_actions = log_actions  # type: ignore[method-assign]


def _record_admin(user_id: Any, objects: list[Any], entries: list[LogEntry]) -> None:
    actor = get_user_model().objects.filter(pk=user_id).first()
    for obj, entry in zip(objects, entries, strict=True):
        project = obj if isinstance(obj, Project) else getattr(obj, "project", None)
        record(
            ADMIN_ACTIONS.get(entry.action_flag, "admin.change"),
            actor=actor,
            project=project if isinstance(project, Project) else None,
            target=obj,
            details={"object": entry.object_repr, "change": entry.get_change_message()},
        )
