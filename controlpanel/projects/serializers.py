"""API serializers of projects: the project, its members and its secrets' names."""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlpanel.projects.models import (
    MAX_SECRET_BYTES,
    QUOTA_FIELDS,
    Membership,
    Project,
    ProjectSecret,
    Role,
)
from controlpanel.projects.settings_rules import (
    ADMIN_ONLY,
    GPU_IDLE_FIELDS,
    SETTING_FIELDS,
    project_field,
)


class ProjectSerializer(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = [
            "slug",
            "name",
            *QUOTA_FIELDS,
            "monthly_budget",
            "budget_stops_running",
            "notebook_idle_minutes",
            *GPU_IDLE_FIELDS,
            "created_at",
        ]
        read_only_fields = ["created_at"]


def _help(name: str) -> str:
    return str(project_field(name).help_text)


class ProjectUpdateSerializer(serializers.ModelSerializer):
    """`PATCH /api/v1/projects/<slug>/`: any of these; managers change the idle limit, the
    budget and the job webhook, site admins the quotas too (settings_rules checks again)."""

    webhook_url = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=Project._meta.get_field("webhook_url").max_length,
        write_only=True,
        help_text="Receives a signed JSON POST when a job ends; empty for none. Only the "
        "answer of the change that sets a first URL carries the signing secret.",
    )

    class Meta:
        model = Project
        fields = list(SETTING_FIELDS)
        extra_kwargs: ClassVar[dict[str, Any]] = {
            name: {"required": False} for name in SETTING_FIELDS if name != "webhook_url"
        } | {
            name: {"required": False, "help_text": f"{ADMIN_ONLY} {_help(name)}"}
            for name in QUOTA_FIELDS
        }


class ProjectChangeSerializer(ProjectUpdateSerializer):
    """`PATCH /api/v1/projects/<slug>/` as documented: the settings, and for site admins the
    project's GPU sharing in Kueue's cohort (queues/services.py checks those)."""

    borrowing_limit = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="Site admins. GPUs it may borrow beyond its quota from idle projects "
        "(null: no limit; 0: none).",
    )
    lending_limit = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="Site admins. GPUs of its quota others may borrow while it is idle "
        "(null: all; at most its GPU quota).",
    )
    fair_sharing_weight = serializers.IntegerField(
        required=False, help_text="Site admins. Its share of idle GPUs, 1 to 1000."
    )

    class Meta(ProjectUpdateSerializer.Meta):
        fields = [
            *ProjectUpdateSerializer.Meta.fields,
            "borrowing_limit",
            "lending_limit",
            "fair_sharing_weight",
        ]


class SharingSerializer(serializers.Serializer):
    """How the project shares GPUs in Kueue's cohort (QUEUE_ENGINE=kueue; site admins change
    it): GPUs it may borrow beyond its quota and lend of it (null: no limit), and its
    fair-sharing weight (1-1000)."""

    borrowing_limit = serializers.IntegerField(allow_null=True, min_value=0)
    lending_limit = serializers.IntegerField(allow_null=True, min_value=0)
    fair_sharing_weight = serializers.IntegerField(min_value=1, max_value=1000)


class ProjectUpdatedSerializer(ProjectSerializer):
    """The project after a change, with the job webhook's signing secret when that change
    made it (null otherwise): it is shown once; and its GPU sharing."""

    webhook_secret = serializers.SerializerMethodField()
    sharing = serializers.SerializerMethodField()

    class Meta(ProjectSerializer.Meta):
        fields = [*ProjectSerializer.Meta.fields, "webhook_secret", "sharing"]

    @extend_schema_field(SharingSerializer)
    def get_sharing(self, project: Project) -> dict[str, Any]:
        from controlpanel.queues.selectors import project_queue  # queues reads projects

        row = project_queue(project)
        names = ("borrowing_limit", "lending_limit", "fair_sharing_weight")
        return {name: getattr(row, name) for name in names}

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_webhook_secret(self, project: Project) -> str | None:
        secret: str | None = self.context.get("webhook_secret")
        return secret


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
