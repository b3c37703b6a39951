"""Every paginated list of the API: `?limit=` and `?offset=` checked, out-of-range values a 400
that names the parameter (a huge limit used to reach the database and answer a 500)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
# Past the last row a page is empty; the bound only keeps the number inside a 64-bit integer.
MAX_OFFSET = 2**31 - 1


class Pagination(LimitOffsetPagination):
    """`{count, next, previous, results}`; `limit` 1 to 1000 (default 50), `offset` from 0."""

    default_limit = DEFAULT_LIMIT
    max_limit = MAX_LIMIT

    def get_limit(self, request: Request) -> int:
        return query_int(request, self.limit_query_param, DEFAULT_LIMIT, 1, MAX_LIMIT)

    def get_offset(self, request: Request) -> int:
        return query_int(request, self.offset_query_param, 0, 0, MAX_OFFSET)

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """What the server sends: all four keys, always (`next`/`previous` null at the ends)."""
        paginated = super().get_paginated_response_schema(schema)
        return paginated | {"required": ["count", "next", "previous", "results"]}

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        }
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"] |= bounds.get(parameter["name"], {})
        return parameters


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    """`?name=` as a whole number from low to high (default when absent or empty); anything else
    is a 400 that names the parameter."""
    raw = request.query_params.get(name, "")
    if raw == "":
        return default
    value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 12 else None
    if value is None or not low <= value <= high:
        shown = raw if len(raw) <= 24 else raw[:24] + "…"
        raise ValidationError({name: [f"Give a whole number from {low} to {high}, not {shown!r}."]})
    return value
