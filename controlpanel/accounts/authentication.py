"""`Authorization: Bearer <token>` for the REST API (personal API tokens)."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from controlpanel.accounts.services import token_authenticate


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        if parts[0].lower() != self.keyword.lower():
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header: use 'Bearer <token>'."
            )
        token = token_authenticate(raw=parts[1])
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) to unauthenticated API calls.
        return self.keyword
