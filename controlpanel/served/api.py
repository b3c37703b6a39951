"""REST API for apps (`/api/v1/apps/`), scoped by project like jobs and notebooks: create,
list, get, start, stop, delete, logs. Every answer reads rows only."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.scoping import api_project
from controlpanel.engine.api import (
    LOG_PARAMETERS,
    PROJECT_PARAM,
    SUBMISSION_ERRORS,
    LogPageSerializer,
    ServedSerializer,
    create_serializer,
)
from controlpanel.engine.api import EventSerializer as ServedEventSerializer
from controlpanel.engine.api import WorkloadViewSet as ServedViewSet
from controlpanel.served import selectors as apps
from controlpanel.served import services, validation
from controlpanel.served.config import Serving, app_url, replicas, user_volumes
from controlpanel.served.models import App
from controlpanel.served.states import AppState


class AppEventSerializer(ServedEventSerializer):
    state = serializers.ChoiceField(choices=AppState.choices, read_only=True)


class AppSerializer(ServedSerializer):
    """An app as read back; writes go through AppCreateSerializer and the services."""

    state = serializers.ChoiceField(choices=AppState.choices, read_only=True)
    url = serializers.SerializerMethodField(help_text="The OpenAI base URL (same across starts).")
    config = serializers.SerializerMethodField(
        help_text="model, adapter, model_name, probe_path, port, scaling, public."
    )
    volumes = serializers.SerializerMethodField(help_text="The read-only volumes added.")
    replicas = serializers.SerializerMethodField(help_text="Ready and wanted, as observed.")
    history = AppEventSerializer(source="events", many=True, read_only=True)

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
        return app_url(app)

    def get_config(self, app: App) -> dict[str, Any]:
        config = Serving.of(app)
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
        return user_volumes(app)

    def get_replicas(self, app: App) -> dict[str, int]:
        ready, wanted = replicas(app)
        return {"ready": ready, "wanted": wanted}


AppCreateSerializer = create_serializer(
    "AppCreateSerializer", "A new app: the fields of app_services.FIELDS.", validation.FIELDS
)


@extend_schema(parameters=[PROJECT_PARAM])
class AppViewSet(ServedViewSet):
    """Apps of a project: a model behind an OpenAI-compatible URL."""

    serializer_class = AppSerializer
    queryset = App.objects.none()
    noun = "app"
    get_row = staticmethod(apps.app_get)

    @extend_schema(responses=AppSerializer(many=True))
    def list(self, request: Request) -> Response:
        access = api_project(request)
        rows = apps.apps_for_project(project=access.project).prefetch_related("events")
        return self._page(request, rows)

    @extend_schema(
        request=AppCreateSerializer,
        responses={
            201: AppSerializer,
            400: OpenApiResponse(SUBMISSION_ERRORS, description="Problems by key."),
        },
    )
    def create(self, request: Request) -> Response:
        return self._create(request, services.app_create)

    def destroy(self, request: Request, pk: str) -> Response:
        """Delete: its objects go, then its row (its billed runs stay)."""
        return self._delete(request, pk, services.app_delete)

    @extend_schema(request=None, responses=AppSerializer)
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str) -> Response:
        """Start a stopped app: a new run, the same URL."""
        return self._act(request, pk, services.app_start)

    @extend_schema(request=None, responses=AppSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str) -> Response:
        """Stop: its replicas go, its URL stays."""
        return self._act(request, pk, services.app_stop)

    @extend_schema(parameters=LOG_PARAMETERS, responses=LogPageSerializer)
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str) -> Response:
        """The server's log lines after `?after=` (0 = the start), up to `limit`."""
        return self._logs(request, pk)
