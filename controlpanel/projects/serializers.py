"""API serializers of projects: the project, its members and its secrets' names."""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib.auth import get_user_model
from rest_framework import serializers

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
