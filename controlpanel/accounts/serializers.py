"""API serializers of accounts: who you are (`/api/v1/me/`) and your API tokens."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlpanel.accounts.models import ApiToken
from controlpanel.projects.models import Membership, Role


class MyProjectSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    # Not an EmailField: an account may have no address, and the schema must allow the "".
    email = serializers.CharField(help_text="The account's e-mail address; empty when unset.")
    is_staff = serializers.BooleanField()
    projects = serializers.SerializerMethodField()

    @extend_schema_field(MyProjectSerializer(many=True))
    def get_projects(self, user: Any) -> list[dict[str, str]]:
        memberships = Membership.objects.filter(user_id=user.pk).select_related("project")
        return [
            {"slug": m.project.slug, "name": m.project.name, "role": m.role} for m in memberships
        ]


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "hint", "created_at", "last_used_at", "expires_at", "revoked_at"]
        read_only_fields = ["id", "hint", "created_at", "last_used_at", "revoked_at"]


class TokenCreatedSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
