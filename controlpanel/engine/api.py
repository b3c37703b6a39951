"""What the REST API of every kind shares: the request serializer built from a kind's contract
fields, the error answer of a refused submission, the log page, the view set a kind's API
subclasses (create, get, delete, an action, the log), and the flavors (`/api/v1/flavors/`).
Each kind's view set (its package's api.py) declares its own endpoints, their schema and help."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from django.conf import settings
from django.db.models import Model, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.pagination import MAX_OFFSET, Pagination, query_int
from controlpanel.api.scoping import api_project
from controlpanel.engine import contract, logs, selectors
from controlpanel.engine.collector import note_followed
from controlpanel.engine.logpage import log_page
from controlpanel.engine.machine_fit import flavor_problem, machine_gpus
from controlpanel.engine.models import JobEvent, Workload
from controlpanel.flavors.models import Flavor
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project

MAX_LOG_LINES = 5000  # one page of `logs`


class FlavorSerializer(serializers.ModelSerializer):
    price_per_hour = serializers.DecimalField(
        source="current_price", max_digits=12, decimal_places=4, read_only=True, allow_null=True
    )

    class Meta:
        model = Flavor
        fields = [
            "name",
            "description",
            "gpu_model",
            "gpus_per_unit",
            "gpu_memory_gib",
            "compute_capability",
            "vcpu_per_unit",
            "memory_gib_per_unit",
            "max_units",
            "price_per_hour",
            "runs_here",
            "why_not",
        ]

    runs_here = serializers.SerializerMethodField(
        help_text="Whether the flavor can run where this panel runs workloads (on the local "
        "backend, this machine and its GPUs; on Kubernetes always true: the cluster decides)."
    )
    why_not = serializers.SerializerMethodField(
        help_text="Why it cannot run here, the sentence a submission with it is refused with "
        "(null when it can)."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gpus: tuple[tuple[str, ...] | None] | None = None
        self._problems: dict[int, str | None] = {}

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_runs_here(self, flavor: Flavor) -> bool:
        return self._problem(flavor) is None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_why_not(self, flavor: Flavor) -> str | None:
        return self._problem(flavor)

    def _problem(self, flavor: Flavor) -> str | None:
        """machine_fit's sentence, the machine's GPUs read once per answer (a list's rows share
        this serializer)."""
        if self._gpus is None:
            self._gpus = (machine_gpus(),)
        if flavor.pk not in self._problems:
            self._problems[flavor.pk] = flavor_problem(flavor, self._gpus[0])
        return self._problems[flavor.pk]


def contract_field(spec: contract.Field) -> serializers.Field:
    """The serializer field of one contract field: it states the shape (for the schema); the
    checks, and their keyed messages, are validation.validate_job's."""
    common: dict[str, Any] = {"required": spec.required, "help_text": spec.help}
    if spec.choices:
        return serializers.ChoiceField(choices=list(spec.choices), allow_blank=True, **common)
    if spec.kind == "text":
        return serializers.CharField(
            allow_blank=not spec.required, max_length=spec.maximum, **common
        )
    if spec.kind == "integer":
        return serializers.IntegerField(
            allow_null=True, min_value=spec.minimum, max_value=spec.maximum, **common
        )
    if spec.kind == "boolean":
        return serializers.BooleanField(allow_null=True, **common)
    if spec.kind == "texts":
        text = serializers.CharField(allow_blank=True)
        return serializers.ListField(child=text, max_length=spec.maximum, **common)
    if spec.kind == "pairs":
        return serializers.DictField(child=serializers.CharField(allow_blank=True), **common)
    return serializers.DictField(**common)


# A refused submission: every problem under its key (`volumes.0`, `env.HF_TOKEN`, ...).
SUBMISSION_ERRORS = {
    "type": "object",
    "description": "Messages by key; a body that is not JSON has one message under `detail`.",
    "properties": {
        "detail": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    },
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
}


class LogLineSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    text = serializers.CharField()
    event = serializers.BooleanField(
        help_text="A progress event of the fine-tune protocol (the job's `progress` has it)."
    )


class LogPageSerializer(serializers.Serializer):
    lines = LogLineSerializer(many=True)
    next = serializers.IntegerField(help_text="Pass as ?after= to get the following lines.")
    eof = serializers.BooleanField(help_text="The run ended and every line was returned.")
    state = serializers.CharField()
    run = serializers.IntegerField(help_text="The run these lines belong to.")
    warning = serializers.CharField(
        required=False, help_text="Present when new lines could not be collected this time."
    )


class FlavorViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = FlavorSerializer
    queryset = Flavor.objects.filter(enabled=True).prefetch_related("prices")
    lookup_field = "name"
    pagination_class = None


PROJECT_PARAM = OpenApiParameter(
    "project", str, description="Project slug (optional when you belong to one project)."
)


def list_parameters(noun: str, *more: OpenApiParameter) -> list[OpenApiParameter]:
    """The filters of a kind's list (engine/selectors.py's ListFilters), then its own `more`."""
    return [
        OpenApiParameter("state", str, description=f"A {noun} state (any case)."),
        OpenApiParameter("owner", str),
        OpenApiParameter("label", str, description="key or key=value"),
        OpenApiParameter("q", str, description=f"Part of the {noun}'s name (any case)."),
        *more,
    ]


LOG_PARAMETERS = [
    OpenApiParameter(
        "after", OpenApiTypes.INT, description="0 to 2147483647 (default 0).", default=0
    ),
    OpenApiParameter(
        "limit", OpenApiTypes.INT, description="1 to 5000 (default 1000).", default=1000
    ),
    OpenApiParameter("run", int, description="A run (default: the current one)."),
]


def log_answer(request: Request, workload: Workload) -> Response:
    """A page of the workload's stored log (LogPageSerializer), the same for every kind."""
    try:
        run = logs.resolve_run(job=workload, value=request.query_params.get("run"))
    except logs.UnknownRun as exc:
        raise ValidationError({"run": [str(exc)]}) from None
    after = query_int(request, "after", 0, 0, MAX_OFFSET)
    limit = query_int(request, "limit", 1000, 1, MAX_LOG_LINES)
    note_followed(workload.pk)  # read every collector round while someone follows
    page = log_page(job=workload, after=after, limit=limit, run=run)
    lines = [{"seq": x.seq, "text": x.text, "event": x.event} for x in page.lines]
    answer = Response(
        {"lines": lines, "next": page.next, "eof": page.eof, "state": workload.state, "run": run}
    )
    if settings.STREAMS_URL:  # where `logs --follow` (the CLI) streams the lines instead
        answer["Link"] = f'<{settings.STREAMS_URL}{request.path}stream/>; rel="stream"'
    return answer


class HistoryList(serializers.ListSerializer):
    """A workload's `history`: the page's events where a list read them at once (`history`
    in the context: selectors.page_reads), else the workload's own."""

    def get_attribute(self, instance: Any) -> Any:
        read = page_read(self.context, "history", instance)
        return super().get_attribute(instance) if read is None else read


def page_read(context: Mapping[str, Any], name: str, workload: Any) -> Any:
    """What a list read at once for this row (`name` of selectors.page_reads, in the
    serializer's context); None for a row read alone."""
    return context.get(name, {}).get(workload.pk)


# A change of state; each kind sets `state`'s choices. (No docstring: the schema would show
# it as each kind's description.)
class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["run", "state", "reason", "at"]
        list_serializer_class = HistoryList


class QueuePositionSerializer(serializers.Serializer):
    """Where a waiting workload stands, counted from 1 (null once it runs). With Kueue, Kueue's
    visibility API as the panel last read it (every QUEUES_OBSERVE_SECONDS): `local` in its
    project's LocalQueue, `cluster` in its ClusterQueue. With the builtin engine, the panel's
    queue: `local` in the project's, or `cluster` where every project shares one machine."""

    local = serializers.IntegerField(allow_null=True, help_text="Place in the project's queue.")
    cluster = serializers.IntegerField(
        allow_null=True, help_text="Place in the queue it shares with other projects or queues."
    )
    said = serializers.CharField(help_text='In words: "3rd in the queue for team-a".')


QUEUE_POSITION_HELP = "Where it waits, while it waits (null otherwise)."


def queue_position_of(workload: Any, context: Mapping[str, Any]) -> dict[str, Any] | None:
    """A workload's `queue_position` in the API (QueuePositionSerializer): from the page's
    places where a list read them at once (`queue_places` in the serializer's context)."""
    if "queue_places" in context:
        place = context["queue_places"].get(str(workload.pk))
    else:
        place = selectors.queue_place(job=workload)
    return None if place is None else place.as_dict()


class ServedSerializer(serializers.ModelSerializer):
    """The fields every served workload has; each kind adds its own and lists them in Meta,
    around HEAD and STATE (the order is the answer's and the schema's)."""

    HEAD = ("id", "project", "owner", "name", "image")
    STATE = ("volumes", "env", "labels", "state", "state_reason", "queue_position", "run", "url")

    project = serializers.CharField(source="project.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True)
    cost = serializers.SerializerMethodField(help_text="Every run so far, estimated.")
    queue_position = serializers.SerializerMethodField(help_text=QUEUE_POSITION_HELP)

    @extend_schema_field(QueuePositionSerializer(allow_null=True))
    def get_queue_position(self, workload: Any) -> dict[str, Any] | None:
        return queue_position_of(workload, self.context)

    def get_cost(self, workload: Any) -> str | None:
        runs = page_read(self.context, "runs", workload)
        cost = selectors.workload_cost_estimate(workload=workload, runs=runs)
        return None if cost is None else str(cost)


def served_fields(own: str, later: str) -> list[str]:
    """A served kind's `Meta.fields`: HEAD, its `own` fields, STATE, then its `later` ones
    (names apart by spaces); the order is the answer's and the schema's."""
    return [*ServedSerializer.HEAD, *own.split(), *ServedSerializer.STATE, *later.split()]


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
            **{spec.name: contract_field(spec) for spec in fields},
        },
    )


class WorkloadViewSet(viewsets.ViewSet):
    """A project's workloads of one kind. A subclass names its serializer and its row getter
    in its class line (`class JobViewSet(WorkloadViewSet, serializer=JobSerializer,
    row=jobs.job_get)`): `serializer_class`, `queryset` (its model's, none: it tells the schema
    the id type), `noun` (the model's KIND, the services' keyword: `job`, `notebook`, `app`)
    and `get_row` (`<noun>_get(project=, <noun>_id=)`) follow. It declares its endpoints
    (`list`, and the members made by `created_by`, `deleted_by`, `acted_by`, `log_lines_of`)."""

    pagination_class = Pagination
    lookup_value_regex = "[0-9a-fA-F-]{1,36}"
    serializer_class: ClassVar[type[serializers.ModelSerializer]]
    queryset: ClassVar[QuerySet[Any]]
    noun: ClassVar[str]
    get_row: ClassVar[Callable[..., Any]]

    def __init_subclass__(
        cls,
        *,
        serializer: type[serializers.ModelSerializer] | None = None,
        row: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if serializer is not None:
            model: Any = serializer.Meta.model  # the kind's proxy model
            cls.serializer_class, cls.noun = serializer, model.KIND
            cls.queryset = model.objects.none()
        if row is not None:
            cls.get_row = staticmethod(row)

    def _row(self, project: Project, pk: Any) -> Any:
        return type(self).get_row(project=project, **{f"{self.noun}_id": pk})

    def _workload(self, request: Request, pk: str) -> tuple[ProjectAccess, Any]:
        access = api_project(request)
        return access, self._row(access.project, pk)

    def _answer(self, workload: Model, **kwargs: Any) -> Response:
        return Response(self.serializer_class(workload).data, **kwargs)

    def _page(self, request: Request, rows: QuerySet[Any]) -> Response:
        paginator = self.pagination_class()
        # The page's runs, events, flavors and places: a few reads (page_reads), not a prefetch.
        page = paginator.paginate_queryset(rows.prefetch_related(None), request, view=self) or []
        answer = self.serializer_class(page, many=True, context=selectors.page_reads(page))
        return paginator.get_paginated_response(answer.data)

    def _create(self, request: Request, service: Callable[..., Model]) -> Response:
        access = api_project(request)
        data = request.data if isinstance(request.data, dict) else {}
        # The new row as stored (workload_create gives its runs and events): no read back (#27).
        workload = service(access=access, user=request.user, data=data)
        return self._answer(workload, status=status.HTTP_201_CREATED)

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


# A kind's view set declares its endpoints with these, each with its own help (the schema's
# description) and serializers: the answer is the same for every kind.
Method = Callable[..., Response]


def created_by(service: Callable[..., Model], request: type, answer: type) -> Method:
    """`create`: the kind's create service on the request's body; 201 and the new row."""

    def create(self: WorkloadViewSet, request: Request) -> Response:
        return self._create(request, service)

    errors = OpenApiResponse(SUBMISSION_ERRORS, description="Problems by key.")
    return extend_schema(request=request, responses={201: answer, 400: errors})(create)


def deleted_by(service: Callable[..., Any], doc: str | None = None) -> Method:
    """`destroy`: the kind's delete service; 204."""

    def destroy(self: WorkloadViewSet, request: Request, pk: str) -> Response:
        return self._delete(request, pk, service)

    destroy.__doc__ = doc
    return destroy


def acted_by(name: str, service: Callable[..., Model], answer: type, doc: str) -> Method:
    """A POST action on one workload (`<id>/<name>/`): the service, then the row as it is."""

    def act(self: WorkloadViewSet, request: Request, pk: str) -> Response:
        return self._act(request, pk, service)

    act.__name__ = act.__qualname__ = name.replace("-", "_")
    act.__doc__ = doc
    url_path = name if "-" in name else None
    decorated = action(detail=True, methods=["post"], url_path=url_path)(act)
    return extend_schema(request=None, responses=answer)(decorated)


def log_lines_of(doc: str) -> Method:
    """`<id>/logs/`: a page of the workload's stored log (log_answer)."""

    def logs(self: WorkloadViewSet, request: Request, pk: str) -> Response:
        return self._logs(request, pk)

    logs.__doc__ = doc
    decorated = action(detail=True, methods=["get"])(logs)
    return extend_schema(parameters=LOG_PARAMETERS, responses=LogPageSerializer)(decorated)
