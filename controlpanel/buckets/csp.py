"""Pages that upload or download from a browser must let it talk to the datastores."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse

from controlpanel.buckets.selectors import datastore_origins


def allow_datastores(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Add every datastore's origin to this response's CSP connect-src (django-csp reads
    `_csp_update`), so the page's script may PUT parts to presigned URLs."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        origins = datastore_origins()
        if origins:
            response._csp_update = {"connect-src": origins}  # type: ignore[attr-defined]
        return response

    return wrapper
