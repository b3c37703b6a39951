"""The site admins' audit log page (`/audit/`) and its CSV: the same filtered rows, newest first.
Anyone else gets 404; a signed-out visitor is sent to log in."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode

from controlpanel.audit.models import AuditEvent
from controlpanel.audit.selectors import audit_events, audit_filters
from controlpanel.audit.targets import shown_events
from controlpanel.projects.access import site_admin_page

PAGE_SIZE = 50
CSV_COLUMNS = (
    "at",
    "action",
    "actor",
    "project",
    "target_type",
    "target_id",
    "details",
    "ip",
    "request_id",
)


def _bad(problems: dict[str, str]) -> HttpResponse:
    return HttpResponse(
        "\n".join(problems.values()), status=400, content_type="text/plain; charset=utf-8"
    )


@site_admin_page
def audit_list(request: HttpRequest) -> HttpResponse:
    filters, problems = audit_filters(request.GET)
    events = audit_events(filters)
    page = Paginator(events, PAGE_SIZE).get_page(request.GET.get("page"))
    listed = list(page)
    shown = shown_events(listed, viewer=request.user)
    rows = [(event, shown[event.pk], details_shown(event.details)) for event in listed]
    query = urlencode(filters.query())
    return render(
        request,
        "audit/list.html",
        {"page": page, "rows": rows, "filters": filters, "problems": problems, "query": query},
        status=400 if problems else 200,
    )


def details_shown(details: dict[str, Any]) -> list[tuple[str, str]]:
    """The details worth reading: an empty value (a stop without a reason) says nothing, so
    it is left out rather than shown as "reason=". The CSV keeps every detail as recorded."""
    shown = []
    for key, value in details.items():
        if value is None or value == "" or value == [] or value == {}:
            continue
        text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        shown.append((key, text))
    return shown


def csv_cell(value: Any) -> Any:
    """Text a spreadsheet would run as a formula is quoted with an apostrophe."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


def csv_row(event: AuditEvent) -> list[Any]:
    return [
        csv_cell(value)
        for value in (
            event.at.isoformat(),
            event.action,
            event.actor_username,
            event.project_slug,
            event.target_type,
            event.target_id,
            json.dumps(event.details, sort_keys=True, ensure_ascii=False),
            event.ip,
            event.request_id,
        )
    ]


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv_lines(events: Any) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for event in events.iterator(chunk_size=2000):
        yield writer.writerow(csv_row(event))


@site_admin_page
def audit_csv(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    filters, problems = audit_filters(request.GET)
    if problems:
        return _bad(problems)
    response = StreamingHttpResponse(
        _csv_lines(audit_events(filters)), content_type="text/csv; charset=utf-8"
    )
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    return response
