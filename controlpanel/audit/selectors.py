"""Reading the audit log: the filters of the admins' page (from its URL) and the rows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import QuerySet
from django.http import QueryDict
from django.utils import timezone

from controlpanel.audit.models import AuditEvent

ACTION_PREFIX = re.compile(r"[a-z_.]{1,64}")


@dataclass(frozen=True)
class AuditFilters:
    action: str = ""
    user: str = ""
    project: str = ""
    start: date | None = None
    end: date | None = None  # inclusive

    def query(self) -> dict[str, str]:
        """The filters as URL parameters (for the pager and the CSV link)."""
        values = {
            "action": self.action,
            "user": self.user,
            "project": self.project,
            "from": self.start.isoformat() if self.start else "",
            "to": self.end.isoformat() if self.end else "",
        }
        return {key: value for key, value in values.items() if value}


def _date(params: QueryDict, key: str, problems: dict[str, str]) -> date | None:
    value = params.get(key, "").strip()
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        problems[key] = f"{key}: {value[:40]!r} is not a date such as 2026-01-31."
        return None


def audit_filters(params: QueryDict) -> tuple[AuditFilters, dict[str, str]]:
    """The filters from the URL, and a message per bad parameter."""
    problems: dict[str, str] = {}
    action = params.get("action", "").strip()
    if action and not ACTION_PREFIX.fullmatch(action):
        problems["action"] = (
            "action: use the start of an action name, such as auth. or token.create "
            "(lowercase letters, dots and underscores)."
        )
        action = ""
    user = params.get("user", "").strip()
    if len(user) > 150:
        problems["user"] = "user: a username has at most 150 characters."
        user = ""
    project = params.get("project", "").strip()
    if len(project) > 100:
        problems["project"] = "project: a project's slug has at most 100 characters."
        project = ""
    start, end = _date(params, "from", problems), _date(params, "to", problems)
    if start and end and start > end:
        problems["to"] = "to: the end date is before the start date."
    return AuditFilters(action, user, project, start, end), problems


def _midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def audit_events(filters: AuditFilters) -> QuerySet[AuditEvent]:
    """The events the filters select, newest first."""
    events = AuditEvent.objects.all()
    conditions: dict[str, Any] = {}
    if filters.action:
        conditions["action__startswith"] = filters.action
    if filters.user:
        conditions["actor_username__iexact"] = filters.user
    if filters.project:
        conditions["project_slug__iexact"] = filters.project
    if filters.start:
        conditions["at__gte"] = _midnight(filters.start)
    if filters.end:
        conditions["at__lt"] = _midnight(filters.end + timedelta(days=1))
    return events.filter(**conditions).order_by("-at", "-id")
