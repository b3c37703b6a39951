"""REST API of accounts: who you are (`/api/v1/me/`) and your personal API tokens."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from controlpanel.accounts import serializers as s
from controlpanel.accounts.models import ApiToken
from controlpanel.accounts.services import token_create, token_revoke


@extend_schema(responses=s.MeSerializer)
@api_view(["GET"])
def me(request: Request) -> Response:
    return Response(s.MeSerializer(request.user).data)


class TokenViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your personal API tokens. The token value is returned once, by create."""

    serializer_class = s.TokenSerializer

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation, no user
            return ApiToken.objects.none()
        user: Any = self.request.user  # authenticated: a User
        return ApiToken.objects.filter(user=user)

    @extend_schema(responses=s.TokenCreatedSerializer)
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = s.TokenSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # A token made with a token never outlives it (nor survives its revocation).
        parent = request.auth if isinstance(request.auth, ApiToken) else None
        token, raw = token_create(user=request.user, parent=parent, **serializer.validated_data)
        data = s.TokenCreatedSerializer(token).data | {"token": raw}
        return Response(data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        token_revoke(token=instance)
