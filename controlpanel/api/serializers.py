from __future__ import annotations

from typing import Any, ClassVar

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlpanel.accounts.models import ApiToken
from controlpanel.projects.models import (
    MAX_SECRET_BYTES,
    QUOTA_FIELDS,
    Membership,
    Project,
    ProjectSecret,
    Role,
)


class ProjectSerializer(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = [
            "slug",
            "name",
            *QUOTA_FIELDS,
            "monthly_budget",
            "notebook_idle_minutes",
            "created_at",
        ]
        read_only_fields = ["created_at"]


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.SlugRelatedField(
        source="user",
        slug_field="username",
        queryset=get_user_model().objects.filter(is_active=True),
    )
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)

    class Meta:
        model = Membership
        fields = ["id", "username", "role", "created_at"]
        read_only_fields = ["id", "created_at"]


class MembershipRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


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


class SecretSerializer(serializers.ModelSerializer):
    """A project secret: the value is write-only (never in a response)."""

    value = serializers.CharField(
        write_only=True,
        trim_whitespace=False,
        max_length=MAX_SECRET_BYTES,
        help_text="Stored encrypted; never returned.",
    )
    updated_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = ProjectSecret
        fields = ["name", "value", "updated_by", "updated_at"]
        read_only_fields = ["updated_at"]
        extra_kwargs: ClassVar[dict[str, Any]] = {
            "name": {"validators": []}
        }  # the service says what is wrong
