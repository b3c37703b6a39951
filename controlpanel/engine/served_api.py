"""What the REST API of notebooks and of apps share (notebook_api.py, app_api.py): the fields of
a served workload as read back, its history, its create request, and a view set's answers to
create, get, delete, an action (start, stop...) and its log. Each kind's view set declares its
own endpoints (their schema and help) and calls these."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from django.db.models import Model, QuerySet
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.pagination import Pagination
from controlpanel.api.scoping import api_project
from controlpanel.engine import contract, selectors
from controlpanel.engine.api import _contract_field, log_answer
from controlpanel.engine.models import JobEvent
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project


# A change of state; each kind sets `state`'s choices. (No docstring: the schema would show
# it as each kind's description.)
class ServedEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["run", "state", "reason", "at"]


class ServedSerializer(serializers.ModelSerializer):
    """The fields every served workload has; each kind adds its own and lists them in Meta."""

    project = serializers.CharField(source="project.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True)
    cost = serializers.SerializerMethodField(help_text="Every run so far, estimated.")

    def get_cost(self, workload: Any) -> str | None:
        cost = selectors.workload_cost_estimate(workload=workload)
        return None if cost is None else str(cost)


def create_serializer(name: str, doc: str, fields: Iterable[contract.Field]) -> type:
    """The request of a new workload: `project`, then one field per contract spec."""
    return type(
        name,
        (serializers.Serializer,),
        {
            "__doc__": doc,
            "project": serializers.CharField(
                required=False, help_text="Project slug (or ?project=)."
            ),
            **{spec.name: _contract_field(spec) for spec in fields},
        },
    )


class ServedViewSet(viewsets.ViewSet):
    """A project's workloads of one kind. A subclass sets `serializer_class`, `queryset`, `noun`
    (the services' keyword: `notebook`, `app`) and `get_row` (`<noun>_get(project=,
    <noun>_id=)`)."""

    pagination_class = Pagination
    lookup_value_regex = "[0-9a-fA-F-]{1,36}"
    serializer_class: ClassVar[type[serializers.ModelSerializer]]
    noun: ClassVar[str]
    get_row: ClassVar[Callable[..., Any]]

    def _row(self, project: Project, pk: Any) -> Any:
        return type(self).get_row(project=project, **{f"{self.noun}_id": pk})

    def _workload(self, request: Request, pk: str) -> tuple[ProjectAccess, Any]:
        access = api_project(request)
        return access, self._row(access.project, pk)

    def _answer(self, workload: Model, **kwargs: Any) -> Response:
        return Response(self.serializer_class(workload).data, **kwargs)

    def _page(self, request: Request, rows: QuerySet[Any]) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(self.serializer_class(page, many=True).data)

    def _create(self, request: Request, service: Callable[..., Model]) -> Response:
        access = api_project(request)
        data = request.data if isinstance(request.data, dict) else {}
        workload = service(access=access, user=request.user, data=data)
        fresh = self._row(access.project, workload.pk)
        return self._answer(fresh, status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, pk: str) -> Response:
        return self._answer(self._workload(request, pk)[1])

    def _delete(self, request: Request, pk: str, service: Callable[..., Any]) -> Response:
        access, workload = self._workload(request, pk)
        service(access=access, user=request.user, **{self.noun: workload})
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _act(self, request: Request, pk: str, service: Callable[..., Model]) -> Response:
        """`service` on the workload, then the workload as it now is."""
        access, workload = self._workload(request, pk)
        service(access=access, user=request.user, **{self.noun: workload})
        return self._answer(self._row(access.project, workload.pk))

    def _logs(self, request: Request, pk: str) -> Response:
        return log_answer(request, self._workload(request, pk)[1])
