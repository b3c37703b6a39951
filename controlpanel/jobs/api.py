"""REST API for jobs (`/api/v1/jobs/`), scoped by project."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.scoping import api_project
from controlpanel.engine import selectors
from controlpanel.engine.api import (
    LOG_PARAMETERS,
    PROJECT_PARAM,
    SUBMISSION_ERRORS,
    LogPageSerializer,
    WorkloadViewSet,
    create_serializer,
)
from controlpanel.engine.models import JobEvent
from controlpanel.jobs import contract, services
from controlpanel.jobs import selectors as jobs
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from training.protocol import Snapshot


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


JobCreateSerializer = create_serializer(
    "JobCreateSerializer",
    "A job submission: the fields of the contract (workloads/contract.py).",
    contract.FIELDS,
)


@extend_schema(parameters=[PROJECT_PARAM])
class JobViewSet(WorkloadViewSet):
    """Training jobs of a project."""

    serializer_class = JobSerializer
    queryset = Job.objects.none()  # tells the schema the id type
    noun = "job"
    get_row = staticmethod(jobs.job_get)

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, description="A job state (any case)."),
            OpenApiParameter("owner", str),
            OpenApiParameter("label", str, description="key or key=value"),
            OpenApiParameter("q", str, description="Part of the job's name (any case)."),
            OpenApiParameter(
                "sort", str, description=f"One of {', '.join(jobs.SORTS)} (default -created)."
            ),
        ],
        responses=JobSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        access = api_project(request)
        filters = selectors.ListFilters.from_query(request.query_params)
        rows = jobs.jobs_for_project(project=access.project, filters=filters, whole=True)
        return self._page(request, rows.prefetch_related("events"))

    @extend_schema(
        request=JobCreateSerializer,
        responses={
            201: JobSerializer,
            400: OpenApiResponse(SUBMISSION_ERRORS, description="Problems by key."),
        },
    )
    def create(self, request: Request) -> Response:
        return self._create(request, services.job_submit)

    def destroy(self, request: Request, pk: str) -> Response:
        return self._delete(request, pk, services.job_delete)

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
        return self._logs(request, pk)
