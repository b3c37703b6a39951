"""Who follows a stream, and whether they still may.

A stream is opened with a session cookie or a bearer token; both are kept, so the stream can ask
again the question its opening asked. It asks when it is told to (a message on the user's
channel: a logout, a deactivation, an SSO sign-in that changed the user's projects; a member
removal on the project's channel) and, as a safety net for a message lost, every
STREAMS_RECHECK_SECONDS. A logout names its session: that stream ends without asking, since the
session may not be flushed yet when the message leaves.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user, get_user_model
from django.http import Http404
from django.utils.module_loading import import_string

from controlpanel.accounts.services import token_authenticate
from controlpanel.projects.access import project_access

NO_ACCESS = "You no longer have access to this project."
LOGGED_OUT = "You logged out."
DEACTIVATED = "Your account was deactivated."
TOKEN_GONE = "Your token was revoked or has expired."  # noqa: S105  (a sentence)


@dataclass(frozen=True)
class Viewer:
    """The user and the credential that opened the stream (a session's key or a token)."""

    user: Any
    session_key: str | None = None
    token: str | None = None

    def concerned(self, message: dict[str, Any]) -> bool:
        """Whether `message` asks this viewer's streams to check their access."""
        kind = message.get("t")
        if kind == "access":
            return message.get("user") == str(self.user.pk)
        return kind == "revoke"

    def logged_out(self, message: dict[str, Any]) -> bool:
        return message.get("t") == "revoke" and (
            message.get("session") is not None and message.get("session") == self.session_key
        )

    def other_session(self, message: dict[str, Any]) -> bool:
        """A logout of another session of the same user: nothing to check."""
        return (
            message.get("t") == "revoke"
            and message.get("session") is not None
            and message.get("session") != self.session_key
        )


def session_user(key: str | None) -> Any:
    store = import_string(f"{settings.SESSION_ENGINE}.SessionStore")(session_key=key)
    return get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]


def signed_out(viewer: Viewer) -> tuple[Any, str | None]:
    """The viewer's user read again, and why their credential no longer holds (None: it
    does)."""
    user = get_user_model().objects.filter(pk=viewer.user.pk).first()
    if user is None or not user.is_active:
        return user, DEACTIVATED
    if viewer.token is not None:
        token = token_authenticate(raw=viewer.token)
        if token is None or token.user.pk != user.pk:
            return user, TOKEN_GONE
    elif session_user(viewer.session_key).pk != user.pk:
        return user, LOGGED_OUT
    return user, None


def access_lost(viewer: Viewer, slug: str) -> str | None:
    """Why the viewer may no longer follow the project `slug`'s streams, or None (rows read:
    call it on the streams' read threads)."""
    user, why = signed_out(viewer)
    if why is not None:
        return why
    try:
        project_access(user=user, slug=slug)
    except Http404:
        return NO_ACCESS
    return None
