"""`/api/v1/usage/`: billed usage grouped by day or month, project, user, workload and flavor,
billed up to now (the ledger plus what open runs ran since their last recording; usage.py).

Site admins read every project; a project's managers read the projects they manage; anyone
else is refused. `?project=` narrows to one project with the pages' access rule (another
project: 404; a plain member of it: 403). Bad filters are a 400 naming the parameter.
"""

from __future__ import annotations

import uuid
from datetime import date
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlpanel.api.pagination import Pagination
from controlpanel.api.scoping import api_project
from controlpanel.billing.rules import month_of, month_start, next_month
from controlpanel.billing.usage import DAY
from controlpanel.billing.usage_grouped import (
    UsageQuery,
    flavor_named,
    parse_day,
    parse_month,
    usage_rows,
)
from controlpanel.projects.models import Membership, Role

GROUPS = ("month", "day")
MAX_DAYS = 3660  # ten years of days: a range is read line by line when cut into days


class UsageRowSerializer(serializers.Serializer[dict[str, Any]]):
    period = serializers.CharField(help_text="YYYY-MM (group=month) or YYYY-MM-DD (group=day).")
    project = serializers.CharField(help_text="The project's slug.")
    user = serializers.CharField(allow_null=True, help_text="The workload owner's username.")
    workload = serializers.CharField(allow_null=True, help_text="The workload's id.")
    workload_name = serializers.CharField()
    kind = serializers.CharField(help_text="job, notebook or app.")
    flavor = serializers.CharField()
    minutes = serializers.IntegerField(help_text="Billed minutes (each started minute).")
    unit_minutes = serializers.IntegerField(help_text="Minutes × units.")
    gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=2)
    amount = serializers.DecimalField(
        max_digits=20, decimal_places=2, help_text="Rounded to the cent once, for the row."
    )
    currency = serializers.CharField()
    estimated = serializers.BooleanField(
        help_text="A run in the row ended where it was last seen (its pod vanished)."
    )


def _param(name: str, description: str, **kwargs: Any) -> OpenApiParameter:
    return OpenApiParameter(name, str, description=description, **kwargs)


PARAMETERS = [
    _param("project", "A project's slug (default: every project you may read)."),
    _param("user", "The workloads of this user (username)."),
    _param("workload", "One workload (job, notebook or app id)."),
    _param("flavor", "One flavor (its name)."),
    _param("month", "One month, YYYY-MM (not with start/end). Default: this month (UTC)."),
    _param("start", "First day, YYYY-MM-DD, or YYYY-MM for that month's first day."),
    _param("end", "Last day (included), YYYY-MM-DD, or YYYY-MM for that month's last day."),
    _param("group", "Rows per day or per month (default).", enum=list(GROUPS)),
]


FILTERS = [parameter.name for parameter in PARAMETERS]


def _bad(name: str, message: str) -> exceptions.ValidationError:
    return exceptions.ValidationError({name: [message]})


def _period(params: Any) -> tuple[date, date]:
    """The days asked for: `month`, or `start`..`end` (either side defaults to this month's)."""
    current = month_of(timezone.now())
    month, start, end = params.get("month"), params.get("start"), params.get("end")
    if month is not None and (start is not None or end is not None):
        raise _bad("month", "Give either month or start/end, not both.")
    try:
        if month is not None:
            first = parse_month(month)
            return first, month_start(next_month(first)).date() - DAY
    except ValueError as exc:
        raise _bad("month", str(exc)) from None
    try:
        first = parse_day(start) if start is not None else current
    except ValueError as exc:
        raise _bad("start", str(exc)) from None
    try:
        last = (
            parse_day(end, last=True)
            if end is not None
            else month_start(next_month(first.replace(day=1))).date() - DAY
        )
    except ValueError as exc:
        raise _bad("end", str(exc)) from None
    if last < first:
        raise _bad("end", f"The end ({last}) is before the start ({first}).")
    if (last - first).days >= MAX_DAYS:
        raise _bad("end", f"Ask for at most {MAX_DAYS} days at once.")
    return first, last


def usage_query(request: Request) -> UsageQuery:
    """The query the parameters ask for, scoped to what the caller may read."""
    params = request.query_params
    for name in FILTERS:
        if "\x00" in params.get(name, ""):
            raise _bad(name, "A filter cannot hold a NUL character.")
    group = params.get("group") or "month"
    if group not in GROUPS:
        raise _bad("group", f"{group!r} is not a grouping: use day or month.")
    start, end = _period(params)
    user = request.user
    projects: frozenset[int] | None
    if params.get("project"):
        projects = frozenset({api_project(request, slug=params["project"], manage=True).project.pk})
    elif user.is_staff:
        projects = None
    else:
        managed = Membership.objects.filter(user_id=int(user.pk or 0), role=Role.MANAGER)
        projects = frozenset(managed.values_list("project_id", flat=True))
        if not projects:
            raise exceptions.PermissionDenied(
                "Only site admins and project managers can read usage."
            )
    user_id = None
    if params.get("user"):
        found = get_user_model().objects.filter(username=params["user"]).first()
        if found is None:
            raise _bad("user", f"No user {params['user']!r}.")
        user_id = found.pk
    workload_id = None
    if params.get("workload"):
        try:
            workload_id = uuid.UUID(params["workload"])
        except ValueError:
            raise _bad("workload", f"{params['workload']!r} is not a workload id.") from None
    flavor_id = None
    if params.get("flavor"):
        flavor = flavor_named(params["flavor"])
        if flavor is None:
            raise _bad("flavor", f"No flavor {params['flavor']!r}.")
        flavor_id = flavor.pk
    return UsageQuery(
        start=start,
        end=end,
        group=group,
        projects=projects,
        user_id=user_id,
        workload_id=workload_id,
        flavor_id=flavor_id,
    )


class UsageView(APIView):
    """Billed usage, one row per period (day or month), project, user, workload and flavor;
    only RUNNING time, each started minute in full (one at least), at the flavor's price in
    effect for that minute, per unit; days and months in UTC. Runs still going count up to
    now. Site admins read every project, managers the projects they manage."""

    pagination_class = Pagination

    @extend_schema(parameters=PARAMETERS, responses=UsageRowSerializer(many=True))
    def get(self, request: Request) -> Response:
        query = usage_query(request)
        rows = [row.as_dict(query.group) for row in usage_rows(query)]
        paginator = Pagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        assert page is not None
        body = UsageRowSerializer(page, many=True).data  # type: ignore[arg-type]
        return paginator.get_paginated_response(body)
