"""What a dashboard shows: the range (whole UTC days) and the filters, read from the URL so a
view can be shared; bad values get a precise error each and are left out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from urllib.parse import urlencode

from django.utils import timezone

from controlpanel.engine.validation import LABEL_RE

RANGES = {
    "today": "Today",
    "7d": "7 days",
    "30d": "30 days",
    "month": "This month",
    "custom": "Custom",
}
MAX_DAYS = 366


@dataclass(frozen=True)
class DashboardFilters:
    """A range of days (first..last, inclusive) and optional owner, label, flavor."""

    range: str
    first: date
    last: date
    user: str = ""
    label: str = ""
    flavor: str = ""

    @property
    def start(self) -> datetime:
        return datetime(self.first.year, self.first.month, self.first.day, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        return datetime(self.last.year, self.last.month, self.last.day, tzinfo=UTC) + timedelta(
            days=1
        )

    @property
    def days(self) -> list[date]:
        return [self.first + timedelta(days=n) for n in range((self.last - self.first).days + 1)]

    def query(self, **extra: str) -> str:
        """The query string that shows this view (what links and exports carry)."""
        params = {"range": self.range}
        if self.range == "custom":
            params |= {"from": self.first.isoformat(), "to": self.last.isoformat()}
        params |= {k: v for k, v in (("user", self.user), ("label", self.label)) if v}
        if self.flavor:
            params["flavor"] = self.flavor
        return urlencode(params | extra)


def _date(text: str, name: str, problems: dict[str, str]) -> date | None:
    try:
        return date.fromisoformat(text)
    except ValueError:
        problems[name] = f"{name!r} must be a date written YYYY-MM-DD (got {text[:20]!r})."
        return None


def _range(
    query: Mapping[str, str], today: date, problems: dict[str, str]
) -> tuple[str, date, date]:
    name = query.get("range", "") or "7d"
    if name not in RANGES:
        problems["range"] = f"Unknown range {name[:20]!r}: choose one of {', '.join(RANGES)}."
        name = "7d"
    if name == "custom":
        first = _date(query.get("from", ""), "from", problems)
        last = _date(query.get("to", ""), "to", problems)
        if first and last and first > last:
            problems["to"] = "'to' must be on or after 'from'."
        elif first and last and (last - first).days >= MAX_DAYS:
            problems["to"] = f"A range spans at most {MAX_DAYS} days."
        elif first and last:
            return name, first, last
        name = "7d"
    if name == "today":
        return name, today, today
    if name == "30d":
        return name, today - timedelta(days=29), today
    if name == "month":
        return name, today.replace(day=1), today
    return name, today - timedelta(days=6), today


def dashboard_filters(
    query: Mapping[str, str], *, now: datetime | None = None
) -> tuple[DashboardFilters, dict[str, str]]:
    """The filters of a query string, and what was wrong with each bad part (by name)."""
    problems: dict[str, str] = {}
    today = (now or timezone.now()).astimezone(UTC).date()
    name, first, last = _range(query, today, problems)
    label = query.get("label", "").strip()
    key, _, value = label.partition("=")
    if label and not (LABEL_RE.fullmatch(key) and (not value or LABEL_RE.fullmatch(value))):
        problems["label"] = (
            f"Bad label filter {label[:80]!r}: give key or key=value (letters, digits, - _ .)."
        )
        label = ""
    return (
        DashboardFilters(
            range=name,
            first=first,
            last=last,
            user=query.get("user", "").strip()[:150],
            label=label,
            flavor=query.get("flavor", "").strip()[:40],
        ),
        problems,
    )
