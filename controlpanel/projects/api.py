"""REST API of projects: the projects you belong to, their members and secrets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.shortcuts import get_object_or_404
from django.utils.cache import add_never_cache_headers
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.api.scoping import api_project
from controlpanel.projects import serializers as s
from controlpanel.projects import services as project_services
from controlpanel.projects.models import Membership, Project, ProjectSecret
from controlpanel.projects.selectors import members_of, projects_for_user, secrets_of
from controlpanel.projects.settings_rules import FieldsRefused, project_settings_check
from controlpanel.queues.services import SHARING_FIELDS, project_queue_update, sharing_check


class ProjectViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Projects you belong to (all of them for site admins); admins create them."""

    serializer_class = s.ProjectSerializer
    lookup_field = "slug"
    lookup_value_regex = "[a-z0-9-]+"

    def get_queryset(self) -> Any:
        return projects_for_user(user=self.request.user).order_by("name")

    def get_object(self) -> Project:
        return api_project(self.request, slug=self.kwargs["slug"]).project

    def perform_create(self, serializer: Any) -> None:
        if not self.request.user.is_staff:
            raise PermissionDenied("Only site admins can create projects.")
        serializer.instance = project_services.project_create(
            by=self.request.user, **serializer.validated_data
        )

    @extend_schema(request=s.ProjectChangeSerializer, responses=s.ProjectUpdatedSerializer)
    def partial_update(self, request: Request, slug: str) -> Response:
        """Change what you may change: managers the notebook idle limit, the budget and the
        job webhook; site admins the quotas and the GPU sharing (`borrowing_limit`,
        `lending_limit`, `fair_sharing_weight`: Kueue's cohort) too. A field your role may
        not change is named in a 403, a bad value in a 400; either way nothing changes."""
        access = api_project(request, slug=slug, manage=True)
        if not isinstance(request.data, Mapping):
            raise ValidationError({"detail": "Send a JSON object of the settings to change."})
        data = dict(request.data)
        # How it shares GPUs in Kueue's cohort: site admins (queues/services.py).
        sharing = {name: data.pop(name) for name in SHARING_FIELDS if name in data}
        if sharing:
            sharing_check(access=access)
        try:
            project_settings_check(access=access, fields=data.keys())
        except FieldsRefused as exc:
            raise PermissionDenied({"detail": str(exc), **exc.fields}) from None
        serializer = s.ProjectUpdateSerializer(data=data, partial=True)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():  # a bad value in either changes nothing
            if sharing:
                project_queue_update(access=access, changes=sharing)
            result = project_services.project_settings_update(
                access=access, changes=dict(serializer.validated_data)
            )
        if result.admits_more:
            from controlpanel.engine.tasks import admit_soon  # the engine reads projects

            admit_soon(access.project.pk)
        context = {"webhook_secret": result.webhook_secret}
        response = Response(s.ProjectUpdatedSerializer(access.project, context=context).data)
        if result.webhook_secret:
            add_never_cache_headers(response)
        return response


class MemberViewSet(viewsets.ViewSet):
    """Members of one project; managers add, change and remove them."""

    serializer_class = s.MembershipSerializer
    queryset = Membership.objects.none()  # only tells the schema the id type
    lookup_value_regex = "[0-9]+"

    def list(self, request: Request, project_slug: str) -> Response:
        access = api_project(request, slug=project_slug)
        return Response(s.MembershipSerializer(members_of(project=access.project), many=True).data)

    def create(self, request: Request, project_slug: str) -> Response:
        access = api_project(request, slug=project_slug, manage=True)
        serializer = s.MembershipSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        membership = project_services.member_add(
            access=access,
            user=serializer.validated_data["user"],
            role=serializer.validated_data["role"],
        )
        return Response(s.MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.MembershipRoleSerializer, responses=s.MembershipSerializer)
    def partial_update(self, request: Request, project_slug: str, pk: str) -> Response:
        access = api_project(request, slug=project_slug, manage=True)
        membership = get_object_or_404(Membership, pk=pk, project=access.project)
        serializer = s.MembershipRoleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        project_services.member_set_role(
            access=access, membership=membership, role=serializer.validated_data["role"]
        )
        return Response(s.MembershipSerializer(membership).data)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "hand_over_to",
                str,
                description="A member's username: what the leaver owns here becomes theirs "
                "(audited) instead of stopping.",
            )
        ]
    )
    def destroy(self, request: Request, project_slug: str, pk: str) -> Response:
        """Remove a member: their jobs, notebooks and apps here stop, or with `hand_over_to`
        become that member's."""
        access = api_project(request, slug=project_slug, manage=True)
        membership = get_object_or_404(Membership, pk=pk, project=access.project)
        heir = request.query_params.get("hand_over_to", "").strip()
        project_services.member_remove(access=access, membership=membership, hand_over_to=heir)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SecretViewSet(viewsets.ViewSet):
    """Names of one project's secrets (every member sees them, to reference them from jobs as
    env `NAME=secret:<name>`); managers set and delete them. A value is never returned."""

    serializer_class = s.SecretSerializer
    lookup_field = "name"
    lookup_value_regex = "[A-Za-z0-9_]+"

    def list(self, request: Request, project_slug: str) -> Response:
        access = api_project(request, slug=project_slug)
        return Response(s.SecretSerializer(secrets_of(project=access.project), many=True).data)

    def create(self, request: Request, project_slug: str) -> Response:
        """Create the secret, or replace the value of the one with that name."""
        access = api_project(request, slug=project_slug, manage=True)
        serializer = s.SecretSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        secret = project_services.project_secret_set(
            access=access, by=request.user, **serializer.validated_data
        )
        return Response(s.SecretSerializer(secret).data, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, project_slug: str, name: str) -> Response:
        access = api_project(request, slug=project_slug, manage=True)
        try:
            project_services.project_secret_delete(access=access, name=name)
        except ProjectSecret.DoesNotExist as exc:
            raise NotFound(str(exc)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)
