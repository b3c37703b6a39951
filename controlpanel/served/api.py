"""REST API for apps (`/api/v1/apps/`), scoped by project like jobs and notebooks: create,
list, get, start, stop, delete, logs. Every answer reads rows only."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.scoping import api_project
from controlpanel.engine.api import (
    PROJECT_PARAM,
    ServedSerializer,
    acted_by,
    create_serializer,
    created_by,
    deleted_by,
    log_lines_of,
    served_fields,
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
        fields = served_fields(
            "flavor gpu config", "replicas created_at started_at state_changed_at history cost"
        )

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
class AppViewSet(ServedViewSet, serializer=AppSerializer, row=apps.app_get):
    """Apps of a project: a model behind an OpenAI-compatible URL."""

    @extend_schema(responses=AppSerializer(many=True))
    def list(self, request: Request) -> Response:
        access = api_project(request)
        rows = apps.apps_for_project(project=access.project).prefetch_related("events")
        return self._page(request, rows)

    create = created_by(services.app_create, AppCreateSerializer, AppSerializer)
    destroy = deleted_by(
        services.app_delete, "Delete: its objects go, then its row (its billed runs stay)."
    )
    start = acted_by(
        "start", services.app_start, AppSerializer, "Start a stopped app: a new run, the same URL."
    )
    stop = acted_by(
        "stop", services.app_stop, AppSerializer, "Stop: its replicas go, its URL stays."
    )
    logs = log_lines_of("The server's log lines after `?after=` (0 = the start), up to `limit`.")
