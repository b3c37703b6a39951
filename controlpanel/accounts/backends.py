"""Authentication backends: passwords (refused with OIDC_ONLY=1) and the sessions of the
OpenID Connect sign-in (which authenticates nothing itself: oidc.py verifies the provider's
answer and logs the user in with this backend).

Both load a session's user only while the account is active (Django's ModelBackend rule), so
deactivating someone ends their sessions at their next request.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest


class PasswordBackend(ModelBackend):
    """User name and password; with OIDC_ONLY=1 no password is accepted, and the sessions a
    password opened before SSO became the only way in end."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if settings.OIDC_ONLY:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_user(self, user_id: Any) -> Any:
        if settings.OIDC_ONLY:
            return None
        return super().get_user(user_id)


class OidcBackend(ModelBackend):
    """The backend an OpenID Connect sign-in's session names: never checks credentials."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        return None
