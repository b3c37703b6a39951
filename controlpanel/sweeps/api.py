"""REST API for sweeps (`/api/v1/sweeps/`: create, list, get with its trials, stop) and the
adapters list (`/api/v1/adapters/`), scoped by project."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.pagination import Pagination
from controlpanel.api.scoping import api_project
from controlpanel.engine.api import PROJECT_PARAM, SUBMISSION_ERRORS
from controlpanel.sweeps import selectors, services
from controlpanel.sweeps.models import Adapter, Sweep, SweepState, Trial, TrialState


class TrialSerializer(serializers.ModelSerializer):
    job = serializers.UUIDField(source="job_id", read_only=True, allow_null=True)
    state = serializers.ChoiceField(choices=TrialState.choices, read_only=True)
    cost = serializers.SerializerMethodField(help_text="Its job's cost so far (the ledger).")

    class Meta:
        model = Trial
        fields = ["number", "job", "params", "state", "reason", "final_loss", "cost"]

    def get_cost(self, trial: Trial) -> str | None:
        return services.money(selectors.trial_cost(trial))


class SweepSerializer(serializers.ModelSerializer):
    """A sweep as read back; writes go through SweepCreateSerializer and sweep_create()."""

    project = serializers.CharField(source="project.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    state = serializers.ChoiceField(choices=SweepState.choices, read_only=True)
    max_cost = serializers.DecimalField(max_digits=12, decimal_places=2, allow_null=True)
    trials = serializers.SerializerMethodField()
    best = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField(help_text="The sum of its trials' costs.")

    class Meta:
        model = Sweep
        fields = [
            "id",
            "project",
            "owner",
            "name",
            "base",
            "space",
            "sampler",
            "pruner",
            "max_trials",
            "parallel",
            "max_cost",
            "seed",
            "state",
            "state_reason",
            "created_at",
            "finished_at",
            "trials",
            "best",
            "cost",
        ]

    def _trials(self, sweep: Sweep) -> list[Trial]:
        # DRF's context is the dict the view passed (its stubs say Mapping): one list per sweep.
        cache = cast(dict[str, Any], self.context).setdefault("trials", {})
        if sweep.pk not in cache:
            cache[sweep.pk] = selectors.trials_of(sweep=sweep)
        return cache[sweep.pk]  # type: ignore[no-any-return]

    @extend_schema_field(TrialSerializer(many=True))
    def get_trials(self, sweep: Sweep) -> list[dict[str, Any]]:
        return TrialSerializer(self._trials(sweep), many=True).data  # type: ignore[return-value]

    @extend_schema_field(TrialSerializer(allow_null=True))
    def get_best(self, sweep: Sweep) -> dict[str, Any] | None:
        best = selectors.best_trial(self._trials(sweep))
        return None if best is None else TrialSerializer(best).data  # type: ignore[return-value]

    def get_cost(self, sweep: Sweep) -> str:
        return str(selectors.sweep_cost(sweep=sweep, trials=self._trials(sweep)))


class SweepCreateSerializer(serializers.Serializer):
    """A new sweep (validation.py checks it; problems come back under these keys)."""

    project = serializers.CharField(required=False, help_text="Project slug (or ?project=).")
    name = serializers.CharField(max_length=80)
    base = serializers.DictField(help_text="A fine-tune job spec, as POST /api/v1/jobs/ takes.")
    space = serializers.DictField(
        help_text='{param: {"values": [...]}} or {param: {"low", "high", "log"}}; params: '
        "learning_rate, rank, alpha, epochs, max_steps, max_length, ... and data "
        "(dataset folders, bucket@ALIAS/prefix)."
    )
    sampler = serializers.ChoiceField(choices=["grid", "random", "tpe"], default="tpe")
    pruner = serializers.ChoiceField(
        choices=["", "median", "successive_halving"], required=False, allow_blank=True
    )
    max_trials = serializers.IntegerField(min_value=1, max_value=100)
    parallel = serializers.IntegerField(min_value=1, max_value=16, default=1)
    max_cost = serializers.DecimalField(
        max_digits=12, decimal_places=2, required=False, allow_null=True
    )
    seed = serializers.IntegerField(required=False, min_value=0)


class AdapterSerializer(serializers.ModelSerializer):
    job = serializers.UUIDField(source="job_id", read_only=True, allow_null=True)
    lineage = serializers.JSONField(read_only=True)

    class Meta:
        model = Adapter
        fields = [
            "id",
            "job",
            "run",
            "name",
            "base_model",
            "params",
            "location",
            "final_loss",
            "eval_loss",
            "cost",
            "data_digest",
            "lineage_problem",
            "lineage",
            "created_at",
        ]


@extend_schema(parameters=[PROJECT_PARAM])
class SweepViewSet(viewsets.ViewSet):
    """Sweeps of a project: a fine-tune spec tried over a search space, trial by trial."""

    pagination_class = Pagination
    lookup_value_regex = "[0-9a-fA-F-]{1,36}"
    queryset = Sweep.objects.none()

    @extend_schema(responses=SweepSerializer(many=True))
    def list(self, request: Request) -> Response:
        access = api_project(request)
        paginator = self.pagination_class()
        rows = selectors.sweeps_for_project(project=access.project)
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(SweepSerializer(page, many=True).data)

    @extend_schema(
        request=SweepCreateSerializer,
        responses={
            201: SweepSerializer,
            400: OpenApiResponse(SUBMISSION_ERRORS, description="Problems by key."),
        },
    )
    def create(self, request: Request) -> Response:
        access = api_project(request)
        data = request.data if isinstance(request.data, dict) else {}
        sweep = services.sweep_create(access=access, user=request.user, data=data)
        fresh = selectors.sweep_get(project=access.project, sweep_id=sweep.pk)
        return Response(SweepSerializer(fresh).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses=SweepSerializer)
    def retrieve(self, request: Request, pk: str) -> Response:
        access = api_project(request)
        sweep = selectors.sweep_get(project=access.project, sweep_id=pk)
        return Response(SweepSerializer(sweep).data)

    @extend_schema(request=None, responses=SweepSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str) -> Response:
        """Stop launching trials and stop the running ones."""
        access = api_project(request)
        sweep = selectors.sweep_get(project=access.project, sweep_id=pk)
        services.sweep_stop(access=access, user=request.user, sweep=sweep)
        fresh = selectors.sweep_get(project=access.project, sweep_id=pk)
        return Response(SweepSerializer(fresh).data)


@extend_schema(parameters=[PROJECT_PARAM])
class AdapterViewSet(viewsets.ViewSet):
    """Adapters of a project: what each finished fine-tune wrote, with its data lineage."""

    pagination_class = Pagination
    queryset = Adapter.objects.none()

    @extend_schema(responses=AdapterSerializer(many=True))
    def list(self, request: Request) -> Response:
        access = api_project(request)
        paginator = self.pagination_class()
        rows = selectors.adapters_for_project(project=access.project)
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(AdapterSerializer(page, many=True).data)

    @extend_schema(responses=AdapterSerializer)
    def retrieve(self, request: Request, pk: str) -> Response:
        access = api_project(request)
        return Response(
            AdapterSerializer(selectors.adapter_get(project=access.project, adapter_id=pk)).data
        )


__all__ = ["AdapterViewSet", "OpenApiTypes", "SweepViewSet"]
