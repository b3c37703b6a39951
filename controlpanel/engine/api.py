"""REST API for jobs and flavors (`/api/v1/jobs/`, `/api/v1/flavors/`), scoped by project."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

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
from controlpanel.engine import contract, logs, selectors, services
from controlpanel.engine.collector import note_followed
from controlpanel.engine.logpage import log_page
from controlpanel.engine.models import Job, JobEvent, JobState, Workload
from controlpanel.flavors.models import Flavor
from controlpanel.projects.access import ProjectAccess
from training.protocol import Snapshot

log = logging.getLogger(__name__)
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
        ]


class JobEventSerializer(serializers.ModelSerializer):
    state = serializers.ChoiceField(choices=JobState.choices, read_only=True)

    class Meta:
        model = JobEvent
        fields = ["run", "state", "reason", "at"]


class JobSerializer(serializers.ModelSerializer):
    """A job as read back; writes go through JobCreateSerializer and job_submit()."""

    project = serializers.CharField(source="project.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True)
    state = serializers.ChoiceField(choices=JobState.choices, read_only=True)
    history = JobEventSerializer(source="events", many=True, read_only=True)
    cost = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField(
        help_text="The fine-tune run's newest progress (training/protocol.py's Snapshot); "
        "paths are the workload's own (/workspace/...)."
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "project",
            "owner",
            *(spec.name for spec in contract.FIELDS),  # what was submitted, as stored
            "state",
            "state_reason",
            "run",
            "exit_code",
            "created_at",
            "queued_at",
            "started_at",
            "finished_at",
            "state_changed_at",
            "progress",
            "history",
            "cost",
        ]

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_progress(self, job: Job) -> dict[str, Any]:
        return Snapshot.from_json(job.progress).to_json()

    def get_cost(self, job: Job) -> str | None:
        cost = selectors.job_cost_estimate(job=job)
        return None if cost is None else str(cost)


def _contract_field(spec: contract.Field) -> serializers.Field:
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
    if spec.kind == "texts":
        text = serializers.CharField(allow_blank=True)
        return serializers.ListField(child=text, max_length=spec.maximum, **common)
    if spec.kind == "pairs":
        return serializers.DictField(child=serializers.CharField(allow_blank=True), **common)
    return serializers.DictField(**common)


JobCreateSerializer = type(
    "JobCreateSerializer",
    (serializers.Serializer,),
    {
        "__doc__": "A job submission: the fields of the contract (workloads/contract.py).",
        "project": serializers.CharField(required=False, help_text="Project slug (or ?project=)."),
        **{spec.name: _contract_field(spec) for spec in contract.FIELDS},
    },
)
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
LOG_PARAMETERS = [
    OpenApiParameter(
        "after", OpenApiTypes.INT, description="0 to 2147483647 (default 0).", default=0
    ),
    OpenApiParameter(
        "limit", OpenApiTypes.INT, description="1 to 5000 (default 1000).", default=1000
    ),
    OpenApiParameter("run", int, description="A run (default: the current one)."),
]


@extend_schema(parameters=[PROJECT_PARAM])
class JobViewSet(viewsets.ViewSet):
    """Training jobs of a project."""

    serializer_class = JobSerializer
    queryset = Job.objects.none()  # tells the schema the id type
    pagination_class = Pagination  # read by the schema: the list is paginated like the others
    lookup_value_regex = "[0-9a-fA-F-]{1,36}"

    def _job(self, request: Request, pk: str) -> tuple[ProjectAccess, Job]:
        access = api_project(request)
        return access, selectors.job_get(project=access.project, job_id=pk)

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, description="A job state (any case)."),
            OpenApiParameter("owner", str),
            OpenApiParameter("label", str, description="key or key=value"),
            OpenApiParameter("q", str, description="Part of the job's name (any case)."),
            OpenApiParameter(
                "sort", str, description=f"One of {', '.join(selectors.SORTS)} (default -created)."
            ),
        ],
        responses=JobSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        access = api_project(request)
        filters = selectors.JobFilters.from_query(request.query_params)
        jobs = selectors.jobs_for_project(
            project=access.project, filters=filters, whole=True
        ).prefetch_related("events")
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(jobs, request, view=self)
        return paginator.get_paginated_response(JobSerializer(page, many=True).data)

    @extend_schema(
        request=JobCreateSerializer,
        responses={
            201: JobSerializer,
            400: OpenApiResponse(SUBMISSION_ERRORS, description="Problems by key."),
        },
    )
    def create(self, request: Request) -> Response:
        access = api_project(request)
        data = request.data if isinstance(request.data, dict) else {}
        job = services.job_submit(access=access, user=request.user, data=data)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(JobSerializer(self._job(request, pk)[1]).data)

    def destroy(self, request: Request, pk: str) -> Response:
        access, job = self._job(request, pk)
        services.job_delete(access=access, user=request.user, job=job)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _act(self, request: Request, pk: str, service: Callable[..., Job]) -> Response:
        access, job = self._job(request, pk)
        return Response(JobSerializer(service(access=access, user=request.user, job=job)).data)

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str) -> Response:
        """Stop: INTERRUPTING, then INTERRUPTED once rw volumes are pushed."""
        return self._act(request, pk, services.job_stop)

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def rerun(self, request: Request, pk: str) -> Response:
        """Run a finished job again (a new run, queued)."""
        return self._act(request, pk, services.job_rerun)

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"], url_path="retry-push")
    def retry_push(self, request: Request, pk: str) -> Response:
        """Push the kept data again after SYNC_FAILED."""
        return self._act(request, pk, services.job_retry_push)

    @extend_schema(parameters=LOG_PARAMETERS, responses=LogPageSerializer)
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str) -> Response:
        """Log lines after `?after=` (a sequence number; 0 = the start), up to `limit`."""
        return log_answer(request, self._job(request, pk)[1])


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
    return Response(
        {"lines": lines, "next": page.next, "eof": page.eof, "state": workload.state, "run": run}
    )
