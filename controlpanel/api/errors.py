"""JSON for every API failure: Django's own ValidationError, unexpected exceptions (500), and
paths under /api/ that match no route (404) — never an HTML page."""

from __future__ import annotations

import logging
from typing import Any

from django.core import signals
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

log = logging.getLogger(__name__)

SERVER_ERROR = {"detail": "Server error: the failure is in the server's log."}
NUL_ERROR = "Text may not contain the NUL character (\\u0000)."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        exc = exceptions.ValidationError(detail)
    if isinstance(exc, DataError) and "NUL" in str(exc):
        # A NUL character reached PostgreSQL, which stores none in text: the caller's input (the
        # fields that are checked say which one; this is for the rest: paths, query parameters).
        exc = exceptions.ParseError(NUL_ERROR)
    response = drf_exception_handler(exc, context)
    if response is None:
        request = context["request"]
        log.error("API error on %s %s", request.method, request.path, exc_info=exc)
        # What Django's own 500 handling does, so error reporters and the test client see it.
        signals.got_request_exception.send(sender=None, request=request)
        response = Response(SERVER_ERROR, status=500)
    return response


@csrf_exempt
def not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    """Any path under /api/ that no route takes. A GET without the trailing slash of a route
    that has one is redirected, as Django's APPEND_SLASH did before this route caught it."""
    if request.method in ("GET", "HEAD") and not request.path.endswith("/"):
        try:
            match = resolve(request.path_info + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not not_found:
            query = request.META.get("QUERY_STRING", "")
            target = f"{request.path}/" + (f"?{query}" if query else "")
            return HttpResponsePermanentRedirect(target)
    return JsonResponse({"detail": "Not found: no API route has this path."}, status=404)
