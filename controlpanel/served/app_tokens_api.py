"""`/api/v1/projects/<slug>/app-tokens/`: a project's app-only tokens (served/app_tokens.py).
Managers list them, make one (its raw value in that answer only) and revoke one (DELETE)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.accounts.models import AppToken
from controlpanel.api.scoping import api_project
from controlpanel.served import app_tokens


class AppTokenSerializer(serializers.ModelSerializer[AppToken]):
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)

    class Meta:
        model = AppToken
        fields = ["id", "name", "hint", "created_by", "created_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class AppTokenCreateSerializer(serializers.Serializer[None]):
    name = serializers.CharField(allow_blank=True, help_text="What the token is for.")


class AppTokenViewSet(viewsets.ViewSet):
    """App-only tokens: they call this project's apps (invoke only) and nothing else."""

    serializer_class = AppTokenSerializer

    def list(self, request: Request, project_slug: str) -> Response:
        access = api_project(request, slug=project_slug)
        tokens = app_tokens.app_tokens_of(access=access)
        return Response(AppTokenSerializer(tokens, many=True).data)

    def create(self, request: Request, project_slug: str) -> Response:
        """Make a token; `token` (the raw value) is in this answer only."""
        access = api_project(request, slug=project_slug)
        ask = AppTokenCreateSerializer(data=request.data)
        ask.is_valid(raise_exception=True)
        token, raw = app_tokens.app_token_create(
            access=access, by=request.user, name=ask.validated_data["name"]
        )
        body = dict(AppTokenSerializer(token).data) | {"token": raw}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH)])
    def destroy(self, request: Request, project_slug: str, pk: str) -> Response:
        """Revoke the token: the apps refuse it from the next call on."""
        access = api_project(request, slug=project_slug)
        try:
            app_tokens.app_token_revoke(access=access, token_id=int(pk) if pk.isdigit() else 0)
        except AppToken.DoesNotExist:
            raise NotFound("No such app-only token in this project.") from None
        return Response(status=status.HTTP_204_NO_CONTENT)
