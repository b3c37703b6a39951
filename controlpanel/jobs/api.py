"""REST API for jobs (`/api/v1/jobs/`), scoped by project."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.scoping import api_project
from controlpanel.engine import selectors
from controlpanel.engine.api import (
    PROJECT_PARAM,
    QUEUE_POSITION_HELP,
    HistoryList,
    QueuePositionSerializer,
    WorkloadViewSet,
    acted_by,
    create_serializer,
    created_by,
    deleted_by,
    list_parameters,
    log_lines_of,
    page_read,
    queue_position_of,
)
from controlpanel.engine.models import JobEvent
from controlpanel.jobs import contract, services
from controlpanel.jobs import selectors as jobs
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from training.snapshot import Snapshot


class JobEventSerializer(serializers.ModelSerializer):
    state = serializers.ChoiceField(choices=JobState.choices, read_only=True)

    class Meta:
        model = JobEvent
        fields = ["run", "state", "reason", "at"]
        list_serializer_class = HistoryList


class JobSerializer(serializers.ModelSerializer):
    """A job as read back; writes go through JobCreateSerializer and job_submit()."""

    project = serializers.CharField(source="project.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True)
    state = serializers.ChoiceField(choices=JobState.choices, read_only=True)
    history = JobEventSerializer(source="events", many=True, read_only=True)
    cost = serializers.SerializerMethodField()
    queue_position = serializers.SerializerMethodField(help_text=QUEUE_POSITION_HELP)
    progress = serializers.SerializerMethodField(
        help_text="The fine-tune run's newest progress (training/snapshot.py's Snapshot); "
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
            "queue_position",
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

    @extend_schema_field(QueuePositionSerializer(allow_null=True))
    def get_queue_position(self, job: Job) -> dict[str, Any] | None:
        return queue_position_of(job, self.context)

    def get_cost(self, job: Job) -> str | None:
        runs = page_read(self.context, "runs", job)
        cost = selectors.job_cost_estimate(job=job, runs=runs)
        return None if cost is None else str(cost)


JobCreateSerializer = create_serializer(
    "JobCreateSerializer",
    "A job submission: the fields of the contract (workloads/contract.py).",
    contract.FIELDS,
)


@extend_schema(parameters=[PROJECT_PARAM])
class JobViewSet(WorkloadViewSet, serializer=JobSerializer, row=jobs.job_get):
    """Training jobs of a project."""

    @extend_schema(
        parameters=list_parameters(
            "job",
            OpenApiParameter(
                "sort", str, description=f"One of {', '.join(jobs.SORTS)} (default -created)."
            ),
        ),
        responses=JobSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        access = api_project(request)
        filters = selectors.ListFilters.from_query(request.query_params)
        rows = jobs.jobs_for_project(project=access.project, filters=filters, whole=True)
        return self._page(request, rows)

    create = created_by(services.job_submit, JobCreateSerializer, JobSerializer)
    destroy = deleted_by(services.job_delete)
    stop = acted_by(
        "stop",
        services.job_stop,
        JobSerializer,
        "Stop: INTERRUPTING, then INTERRUPTED once rw volumes are pushed.",
    )
    rerun = acted_by(
        "rerun", services.job_rerun, JobSerializer, "Run a finished job again (a new run, queued)."
    )
    retry_push = acted_by(
        "retry-push",
        services.job_retry_push,
        JobSerializer,
        "Push the kept data again after SYNC_FAILED.",
    )
    logs = log_lines_of(
        "Log lines after `?after=` (a sequence number; 0 = the start), up to `limit`."
    )
