"""REST API for apps (`/api/v1/apps/`), scoped by project like jobs and notebooks: create,
list, get, start, stop, delete, logs. Every answer reads rows only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.pagination import Pagination
from controlpanel.api.scoping import api_project
from controlpanel.projects.access import ProjectAccess
from controlpanel.workloads import app_services as apps
from controlpanel.workloads import selectors
from controlpanel.workloads.api import (
    LOG_PARAMETERS,
    PROJECT_PARAM,
    SUBMISSION_ERRORS,
    LogPageSerializer,
    _contract_field,
    log_answer,
)
from controlpanel.workloads.models import App, AppState, JobEvent


class AppEventSerializer(serializers.ModelSerializer):
    state = serializers.ChoiceField(choices=AppState.choices, read_only=True)

    class Meta:
        model = JobEvent
        fields = ["run", "state", "reason", "at"]


class AppSerializer(serializers.ModelSerializer):
    """An app as read back; writes go through AppCreateSerializer and the services."""

    project = serializers.CharField(source="project.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True)
    state = serializers.ChoiceField(choices=AppState.choices, read_only=True)
    url = serializers.SerializerMethodField(help_text="The OpenAI base URL (same across starts).")
    config = serializers.SerializerMethodField(
        help_text="model, adapter, model_name, probe_path, port, scaling, public."
    )
    volumes = serializers.SerializerMethodField(help_text="The read-only volumes added.")
    replicas = serializers.SerializerMethodField(help_text="Ready and wanted, as observed.")
    history = AppEventSerializer(source="events", many=True, read_only=True)
    cost = serializers.SerializerMethodField(help_text="Every run so far, estimated.")

    class Meta:
        model = App
        fields = [
            "id",
            "project",
            "owner",
            "name",
            "image",
            "flavor",
            "gpu",
            "config",
            "volumes",
            "env",
            "labels",
            "state",
            "state_reason",
            "run",
            "url",
            "replicas",
            "created_at",
            "started_at",
            "state_changed_at",
            "history",
            "cost",
        ]

    def get_url(self, app: App) -> str:
        return apps.app_url(app)

    def get_config(self, app: App) -> dict[str, Any]:
        config = apps.AppConfig.of(app)
        scaling = config.scaling
        return {
            "model": config.model,
            "adapter": config.adapter,
            "model_name": config.model_name,
            "probe_path": config.probe_path,
            "port": config.port,
            "scaling": config.scaling_mode,
            "min_replicas": scaling.min_replicas,
            "max_replicas": scaling.max_replicas,
            "target_cpu": scaling.target_cpu,
            "target_rps": scaling.target_rps,
            "public": config.public,
        }

    def get_volumes(self, app: App) -> list[str]:
        return apps.user_volumes(app)

    def get_replicas(self, app: App) -> dict[str, int]:
        ready, wanted = apps.replicas(app)
        return {"ready": ready, "wanted": wanted}

    def get_cost(self, app: App) -> str | None:
        cost = selectors.workload_cost_estimate(workload=app)
        return None if cost is None else str(cost)


AppCreateSerializer = type(
    "AppCreateSerializer",
    (serializers.Serializer,),
    {
        "__doc__": "A new app: the fields of app_services.FIELDS.",
        "project": serializers.CharField(required=False, help_text="Project slug (or ?project=)."),
        **{spec.name: _contract_field(spec) for spec in apps.FIELDS},
    },
)


@extend_schema(parameters=[PROJECT_PARAM])
class AppViewSet(viewsets.ViewSet):
    """Apps of a project: a model behind an OpenAI-compatible URL."""

    serializer_class = AppSerializer
    queryset = App.objects.none()
    pagination_class = Pagination
    lookup_value_regex = "[0-9a-fA-F-]{1,36}"

    def _app(self, request: Request, pk: str) -> tuple[ProjectAccess, App]:
        access = api_project(request)
        return access, apps.app_get(project=access.project, app_id=pk)

    @extend_schema(responses=AppSerializer(many=True))
    def list(self, request: Request) -> Response:
        access = api_project(request)
        rows = apps.apps_for_project(project=access.project).prefetch_related("events")
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(AppSerializer(page, many=True).data)

    @extend_schema(
        request=AppCreateSerializer,
        responses={
            201: AppSerializer,
            400: OpenApiResponse(SUBMISSION_ERRORS, description="Problems by key."),
        },
    )
    def create(self, request: Request) -> Response:
        access = api_project(request)
        data = request.data if isinstance(request.data, dict) else {}
        app = apps.app_create(access=access, user=request.user, data=data)
        app = apps.app_get(project=access.project, app_id=app.pk)
        return Response(AppSerializer(app).data, status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(AppSerializer(self._app(request, pk)[1]).data)

    def destroy(self, request: Request, pk: str) -> Response:
        """Delete: its objects go, then its row (its billed runs stay)."""
        access, app = self._app(request, pk)
        apps.app_delete(access=access, user=request.user, app=app)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _act(self, request: Request, pk: str, service: Callable[..., App]) -> Response:
        access, app = self._app(request, pk)
        service(access=access, user=request.user, app=app)
        return Response(AppSerializer(apps.app_get(project=access.project, app_id=app.pk)).data)

    @extend_schema(request=None, responses=AppSerializer)
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str) -> Response:
        """Start a stopped app: a new run, the same URL."""
        return self._act(request, pk, apps.app_start)

    @extend_schema(request=None, responses=AppSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str) -> Response:
        """Stop: its replicas go, its URL stays."""
        return self._act(request, pk, apps.app_stop)

    @extend_schema(parameters=LOG_PARAMETERS, responses=LogPageSerializer)
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str) -> Response:
        """The server's log lines after `?after=` (0 = the start), up to `limit`."""
        return log_answer(request, self._app(request, pk)[1])
