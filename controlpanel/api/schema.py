"""OpenAPI description of the bearer-token authentication."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as BaseAutoSchema


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "controlpanel.accounts.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "A personal API token."}


ERROR_BODY = {
    "type": "object",
    "description": "`detail` says what went wrong; a 400 of invalid fields names each field "
    "with its messages.",
    "properties": {"detail": {"type": "string"}},
}
ERRORS = {
    "400": "Invalid input: the body, a query parameter or a path segment.",
    "401": "No credentials, or a token that is unknown, revoked or expired.",
    "403": "The account may not do this (a role, an admin-only operation).",
    "404": "Not found, or not in a project the account is a member of.",
    "429": "Too many requests for this token or account; `Retry-After` says when to retry.",
}


class AutoSchema(BaseAutoSchema):
    """drf-spectacular's, with the error answers every operation can give declared where the
    view declares none of its own: 401, 403 and 429 for any authenticated operation, 404 where a
    path parameter or a `project` names something, 400 where there is input to be invalid (a
    body or a parameter). So a client (and schemathesis' status check) knows every status."""

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        params = operation.get("parameters", [])
        codes = []
        if params or "requestBody" in operation:
            codes.append("400")
        if operation.get("security") != [{}]:
            codes += ["401", "403", "429"]
        if any(p["in"] == "path" or p["name"] == "project" for p in params):
            codes.append("404")
        responses = operation.setdefault("responses", {})
        for code in codes:
            responses.setdefault(
                code,
                {
                    "description": ERRORS[code],
                    "content": {"application/json": {"schema": ERROR_BODY}},
                },
            )
        operation["responses"] = dict(sorted(responses.items()))
        return operation
