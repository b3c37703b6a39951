"""Every error a person's browser is shown is the panel's own page: styled like the rest, with
what happened in a sentence and where to go next.

Django renders 400, 403 and 404 raised as exceptions through the handlers below (its own
400 handler renders without the request, so without the shell). Views and decorators that
return a bare answer instead (`require_POST`'s empty 405, a plain-text 400 or 403) are turned
into the same page by ErrorPageMiddleware, but only for a browser asking for a page: the API,
htmx swaps, probes and scrapers keep the answer they were given.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render

from controlpanel.projects.models import Project
from controlpanel.projects.selectors import projects_for_user

TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Page not found",
    405: "Not something this address does",
}
DEFAULT_MESSAGES = {
    400: "The request could not be understood: a value in the address or the form is wrong.",
    403: "Your account may not do this here.",
    404: "Nothing here: the address may be mistyped, or what it named was deleted.",
}
MACHINE_PATHS = ("/api/", "/metrics", "/healthz", "/readyz", "/auth/", "/admin/", "/static/")
MAX_MESSAGE = 500  # characters of a plain-text answer shown as the page's sentence


def error_page(request: HttpRequest, *, status: int, message: str = "") -> HttpResponse:
    """The styled page for `status`, saying `message` (escaped, as all text is)."""
    context = {
        "error_project": _named_project(request),
        "status": status,
        "title": TITLES.get(status, "Something went wrong"),
        "message": message.strip()[:MAX_MESSAGE] or DEFAULT_MESSAGES.get(status, ""),
    }
    return render(request, f"{status}.html", context, status=status)


def _named_project(request: HttpRequest) -> Project | None:
    """The project the address names, when the user is in it: the way back goes there."""
    match = getattr(request, "resolver_match", None)
    slug = match.kwargs.get("slug") if match else None
    user = getattr(request, "user", None)
    if not slug or user is None:
        return None
    return projects_for_user(user=user).filter(slug=slug).only("slug", "name").first()


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400. The exception's text is not shown: SuspiciousOperation's is for the log."""
    return error_page(request, status=400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler403: PermissionDenied's message is written for the person (services raise it)."""
    return error_page(request, status=403, message=str(exception))


def _method_message(request: HttpRequest, response: HttpResponseBase) -> str:
    allowed = [m.strip() for m in response.get("Allow", "").split(",") if m.strip()]
    takes = f" It only takes {' or '.join(allowed)}." if allowed else ""
    return (
        f"This address does not answer a {request.method} (opened as a page, perhaps from a "
        f"bookmark or a form sent twice).{takes}"
    )


def _wants_page(request: HttpRequest, response: HttpResponseBase) -> bool:
    """A bare 4xx answer (empty or plain text) to a browser that asked for a page."""
    if response.status_code not in TITLES or response.streaming:
        return False
    content_type = response.get("Content-Type", "")
    if response.content and not content_type.startswith("text/plain"):  # type: ignore[attr-defined]
        return False
    return (
        "text/html" in request.headers.get("Accept", "")
        and "HX-Request" not in request.headers
        and not request.path_info.startswith(MACHINE_PATHS)
    )


class ErrorPageMiddleware:
    """Turns a view's bare 400/403/404/405 into the styled page, for browsers' page loads."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if not _wants_page(request, response):
            return response
        status = response.status_code
        if status == 405:
            page = error_page(request, status=405, message=_method_message(request, response))
            page["Allow"] = response["Allow"]
            return page
        text = response.content.decode(response.charset or "utf-8", "replace")  # type: ignore[attr-defined]
        return error_page(request, status=status, message=text)
