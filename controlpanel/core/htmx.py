"""htmx request helpers shared by the views."""

from __future__ import annotations

from django.http import HttpRequest


def wants_fragment(request: HttpRequest) -> bool:
    """An htmx swap wants the fragment; a history restore (cache miss) wants the page."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.history_restore_request  # type: ignore[union-attr]
