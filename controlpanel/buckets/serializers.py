"""API shapes. Credentials are write-only: responses carry hints (`AKIA…1234`) at most."""

from __future__ import annotations

from rest_framework import serializers

from controlpanel.buckets.models import Bucket


class _DatastoreFields(serializers.Serializer):
    alias = serializers.CharField(max_length=32)
    endpoint_url = serializers.URLField(max_length=500)
    region = serializers.CharField(max_length=64, default="us-east-1")
    public_endpoint_url = serializers.URLField(
        max_length=500,
        required=False,
        allow_blank=True,
        default="",
        help_text="Where browsers and the CLI reach it; empty: endpoint_url.",
    )


class DatastoreSerializer(_DatastoreFields):
    is_default = serializers.BooleanField(read_only=True)


class DatastoreCreateSerializer(_DatastoreFields):
    access_key = serializers.CharField(write_only=True, max_length=256)
    secret_key = serializers.CharField(
        write_only=True, max_length=256, style={"input_type": "password"}
    )
    access_key_hint = serializers.CharField(read_only=True)
    secret_key_hint = serializers.CharField(read_only=True)


class BucketSerializer(serializers.ModelSerializer):
    project: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    created_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    volume = serializers.SerializerMethodField(help_text="How a job or notebook names it.")

    class Meta:
        model = Bucket
        fields = [
            "name",
            "datastore",
            "project",
            "origin",
            "created_by",
            "created_at",
            "object_count",
            "total_size",
            "stats_at",
            "state",
            "state_message",
            "empty_done",
            "empty_total",
            "cors_error",
            "volume",
        ]
        read_only_fields = fields

    def get_volume(self, bucket: Bucket) -> str:
        return f"{bucket.name}@{bucket.datastore}"


class BucketCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=63)
    datastore = serializers.CharField(
        max_length=32,
        required=False,
        allow_blank=True,
        help_text="Alias; the default datastore when omitted.",
    )
    project = serializers.CharField(required=False, help_text="Project slug (or ?project=).")


class ObjectSerializer(serializers.Serializer):
    key = serializers.CharField()
    size = serializers.IntegerField()
    last_modified = serializers.DateTimeField()
    etag = serializers.CharField()


class ObjectPageSerializer(serializers.Serializer):
    prefixes = serializers.ListField(child=serializers.CharField())
    objects = ObjectSerializer(many=True)
    next_token = serializers.CharField(allow_null=True)


class ObjectDeleteSerializer(serializers.Serializer):
    keys = serializers.ListField(
        child=serializers.CharField(), max_length=1000, allow_empty=True, default=list
    )
    prefixes = serializers.ListField(
        child=serializers.CharField(),
        max_length=100,
        allow_empty=True,
        default=list,
        help_text="Folders: every object in each ('runs/1' is the folder 'runs/1/').",
    )


class ObjectDeleteResultSerializer(serializers.Serializer):
    deleted = serializers.ListField(child=serializers.CharField())
    # A declared field named like Serializer.errors: DRF's metaclass moves it to _declared_fields.
    errors = serializers.ListField(child=serializers.DictField())  # type: ignore[assignment]


class UrlSerializer(serializers.Serializer):
    url = serializers.URLField()
    expires_in = serializers.IntegerField()


class KeySerializer(serializers.Serializer):
    key = serializers.CharField(max_length=4096, trim_whitespace=False)


class UploadUrlRequestSerializer(KeySerializer):
    content_type = serializers.CharField(required=False, allow_blank=True, default="")


class UploadStartSerializer(UploadUrlRequestSerializer):
    size = serializers.IntegerField(min_value=0)
    part_size = serializers.IntegerField(required=False, min_value=1)


class UploadPlanSerializer(serializers.Serializer):
    key = serializers.CharField()
    upload_id = serializers.CharField()
    part_size = serializers.IntegerField()
    part_count = serializers.IntegerField()


class UploadPartsRequestSerializer(KeySerializer):
    upload_id = serializers.CharField()
    part_numbers = serializers.ListField(child=serializers.IntegerField(), max_length=1000)


class PresignedPartSerializer(serializers.Serializer):
    part_number = serializers.IntegerField()
    url = serializers.URLField()


class UploadPartsSerializer(serializers.Serializer):
    parts = PresignedPartSerializer(many=True)


class CompletedPartSerializer(serializers.Serializer):
    part_number = serializers.IntegerField(min_value=1, max_value=10000)
    etag = serializers.CharField()


class UploadCompleteSerializer(KeySerializer):
    upload_id = serializers.CharField()
    parts = CompletedPartSerializer(many=True)


class UploadAbortSerializer(KeySerializer):
    upload_id = serializers.CharField()


class UploadedSerializer(serializers.Serializer):
    key = serializers.CharField()
    etag = serializers.CharField()


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()
