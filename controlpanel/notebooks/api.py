"""REST API for notebooks (`/api/v1/notebooks/`), scoped by project exactly like jobs: create,
list (state, owner, label, q), get, start, stop, keep-alive, delete, logs, and who may open one
(`shares/`, `share/`, `unshare/`: notebooks/sharing.py's rules, as on its page).

Every answer reads rows only (the engine's tasks do the cluster work). The editor's token never
appears: `url` is the notebook's address without any query (the local backend's carries the
token), and `open_url` is the panel page that sends a member on to the editor.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.scoping import api_project
from controlpanel.engine import api as engine_api
from controlpanel.engine import selectors
from controlpanel.engine.api import PROJECT_PARAM, SUBMISSION_ERRORS, ServedSerializer
from controlpanel.engine.api import EventSerializer as ServedEventSerializer
from controlpanel.engine.api import WorkloadViewSet as ServedViewSet
from controlpanel.notebooks import selectors as notebook_rows
from controlpanel.notebooks import services as notebooks
from controlpanel.notebooks import sharing
from controlpanel.notebooks.auth import notebook_path
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.notebooks.usercontent import SERVED
from controlpanel.notebooks.validation import FIELDS
from controlpanel.usercontent.hosts import content_host


class NotebookEventSerializer(ServedEventSerializer):
    state = serializers.ChoiceField(choices=NotebookState.choices, read_only=True)


class NotebookSerializer(ServedSerializer):
    """A notebook as read back; writes go through NotebookCreateSerializer and the services."""

    image = serializers.SerializerMethodField(help_text="The notebook image's name.")
    container_image = serializers.CharField(source="image", read_only=True)
    state = serializers.ChoiceField(choices=NotebookState.choices, read_only=True)
    url = serializers.SerializerMethodField(
        help_text="Where the editor is served once RUNNING (empty before)."
    )
    open_url = serializers.SerializerMethodField(
        help_text="The panel's page that opens the editor (log in as a project member)."
    )
    idle_deadline = serializers.SerializerMethodField(
        help_text="When it stops if it stays idle (null: no limit, or not running)."
    )
    history = NotebookEventSerializer(source="events", many=True, read_only=True)

    class Meta:
        model = Notebook
        fields = engine_api.served_fields(
            "container_image editor flavor gpu",
            "open_url created_at started_at finished_at state_changed_at last_activity_at"
            " idle_deadline history cost",
        )

    def get_image(self, notebook: Notebook) -> str:
        return str(notebook.params.get("image", ""))

    def get_url(self, notebook: Notebook) -> str:
        """Its address on its own host (opened through `open_url`, which signs the browser
        in there), once it has been served."""
        if not notebook.url:
            return ""
        return content_host(SERVED.prefix, notebook.pk).origin + notebook_path(notebook)

    def get_open_url(self, notebook: Notebook) -> str:
        path = reverse("notebook-open", args=[notebook.project.slug, notebook.pk])
        return f"{settings.SITE_URL}{path}"

    def get_idle_deadline(self, notebook: Notebook) -> datetime | None:
        return notebooks.idle_deadline(notebook)


NotebookCreateSerializer = engine_api.create_serializer(
    "NotebookCreateSerializer", "A new notebook: the fields of notebooks.FIELDS.", FIELDS
)


class NotebookSharesSerializer(serializers.Serializer):
    """Who besides its owner may open the notebook's editor."""

    project = serializers.BooleanField(help_text="Shared with every member of the project.")
    members = serializers.ListField(
        child=serializers.CharField(), help_text="The current members it is shared with."
    )


class NotebookShareSerializer(serializers.Serializer):
    """Exactly one of: `member` (a username of a current member of the project), or
    `project: true` (every member)."""

    member = serializers.CharField(required=False, allow_blank=False)
    project = serializers.BooleanField(required=False)

    def validate(self, attrs: dict[str, object]) -> dict[str, object]:
        if ("member" in attrs) == bool(attrs.get("project")):
            raise serializers.ValidationError(
                {"member": "Name one member (member), or share with the project (project: true)."}
            )
        return attrs


SHARE_ERRORS = OpenApiResponse(SUBMISSION_ERRORS, description="Problems by key (member).")


def notebooks_filtered(
    *, notebooks_: QuerySet[Notebook], query: Mapping[str, str]
) -> QuerySet[Notebook]:
    """The list narrowed as the job list is (state, owner, label, q); ValidationError by filter
    name on a bad one. A state is a notebook's (any case)."""
    filters, problems = selectors.list_filters_check(
        filters=selectors.ListFilters.from_query(query), states=NotebookState.values
    )
    if problems:
        raise ValidationError(problems)
    return selectors.filtered(notebooks_, filters)


@extend_schema(parameters=[PROJECT_PARAM])
class NotebookViewSet(ServedViewSet, serializer=NotebookSerializer, row=notebook_rows.notebook_get):
    """Notebooks of a project: an editor in the browser, stopped and started at will."""

    @extend_schema(
        parameters=engine_api.list_parameters("notebook"),
        responses=NotebookSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        access = api_project(request)
        rows = notebook_rows.notebooks_for_project(project=access.project).defer(None)
        rows = notebooks_filtered(notebooks_=rows, query=request.query_params)
        return self._page(request, rows)

    create = engine_api.created_by(
        notebooks.notebook_create, NotebookCreateSerializer, NotebookSerializer
    )
    destroy = engine_api.deleted_by(
        notebooks.notebook_delete,
        "Delete: its objects and workspace go, then its row (its billed runs stay).",
    )
    start = engine_api.acted_by(
        "start",
        notebooks.notebook_start,
        NotebookSerializer,
        "Start a stopped notebook: a new run at the same address, with the same workspace.",
    )
    stop = engine_api.acted_by(
        "stop",
        notebooks.notebook_stop,
        NotebookSerializer,
        "Stop: STOPPING while rw volumes are pushed, then STOPPED (the workspace is kept).",
    )
    keep_alive = engine_api.acted_by(
        "keep-alive",
        notebooks.notebook_keep_alive,
        NotebookSerializer,
        "Count as activity now: the idle stop waits a full limit again.",
    )

    @extend_schema(request=None, responses=NotebookSharesSerializer)
    @action(detail=True, methods=["get"])
    def shares(self, request: Request, pk: str) -> Response:
        """Who may open it besides its owner: the project, and members one by one."""
        _, notebook = self._workload(request, pk)
        return Response(NotebookSharesSerializer(sharing.notebook_shares(notebook)).data)

    @extend_schema(
        request=NotebookShareSerializer,
        responses={200: NotebookSharesSerializer, 400: SHARE_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def share(self, request: Request, pk: str) -> Response:
        """Let one current member (`member`), or the whole project (`project: true`), open
        it: its owner only. Audited."""
        return self._share(request, pk, sharing.notebook_share_member, sharing.notebook_share)

    @extend_schema(
        request=NotebookShareSerializer,
        responses={200: NotebookSharesSerializer, 400: SHARE_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def unshare(self, request: Request, pk: str) -> Response:
        """Take a member's share back (the owner or a manager), or the project's (the owner):
        their open editors are refused from the next request. Audited."""
        return self._share(request, pk, sharing.notebook_unshare_member, sharing.notebook_unshare)

    def _share(self, request: Request, pk: str, one: Any, everyone: Any) -> Response:
        access, notebook = self._workload(request, pk)
        asked = NotebookShareSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        kwargs = {"access": access, "user": request.user, "notebook": notebook}
        if "member" in asked.validated_data:
            notebook = one(**kwargs, member=asked.validated_data["member"])
        else:
            notebook = everyone(**kwargs)
        return Response(NotebookSharesSerializer(sharing.notebook_shares(notebook)).data)

    logs = engine_api.log_lines_of(
        "The editor's log lines after `?after=` (0 = the start), up to `limit`."
    )
