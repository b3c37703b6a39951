"""API shapes. Credentials are write-only: responses carry hints (`AKIA…1234`) at most."""

from __future__ import annotations

import re
from collections.abc import Callable

from rest_framework import serializers

from controlpanel.buckets.models import Bucket

# RFC 9110 tokens: `type/subtype`, then `; name=value` parameters (a value may be quoted).
_WORD = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
MEDIA_TYPE_RE = re.compile(rf'{_WORD}/{_WORD}(\s*;\s*{_WORD}=({_WORD}|"[^"\\]*"))*')
MAX_CONTENT_TYPE = 255
MAX_OPAQUE = 1024  # upload ids, ETags and continuation tokens the store handed out
MAX_PREFIX_BYTES = 1024  # a prefix is the start of a key


def _bad_character(value: str, what: str, *, ascii_only: bool) -> str | None:
    """The first character the store cannot take in a header or an XML body, named."""
    for index, char in enumerate(value):
        code = ord(char)
        if code < 32 or code == 127 or 0xD800 <= code <= 0xDFFF:
            return f"The {what} has the control character {char!r} at position {index}."
        if ascii_only and code > 127:
            return f"The {what} has the non-ASCII character {char!r} at position {index}."
    return None


def _check(problem: str | None) -> None:
    if problem:
        raise serializers.ValidationError(problem)


def validate_content_type(value: str) -> None:
    """Sent to the store as a header: printable ASCII in the `type/subtype` shape."""
    _check(_bad_character(value, "content type", ascii_only=True))
    if value and not MEDIA_TYPE_RE.fullmatch(value):
        _check(f"{value!r} is not a media type: give type/subtype, e.g. text/plain.")


def validate_opaque(what: str) -> Callable[[str], None]:
    """A value the store handed out (upload id, ETag, token): sent back as it came."""

    def validate(value: str) -> None:
        _check(_bad_character(value, what, ascii_only=True))

    return validate


def validate_prefix(value: str) -> None:
    _check(_bad_character(value, "prefix", ascii_only=False))
    size = len(value.encode("utf-8"))
    if size > MAX_PREFIX_BYTES:
        _check(f"The prefix is {size} bytes long in UTF-8; keys have at most {MAX_PREFIX_BYTES}.")


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


class ObjectListQuerySerializer(serializers.Serializer):
    """The listing's query: checked here, so the store never sees what it answers 500 to."""

    prefix = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        validators=[validate_prefix],
        help_text="Only keys that start with this.",
    )
    delimiter = serializers.ChoiceField(
        choices=["/", ""],
        required=False,
        allow_blank=True,  # `?delimiter=` is the flat listing, not the default
        default="/",
        help_text="'/' folds keys into folders (`prefixes`); empty lists every key under prefix.",
    )
    token = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        max_length=MAX_OPAQUE,
        validators=[validate_opaque("token")],
        help_text="The `next_token` of the previous page, unchanged.",
    )
    limit = serializers.IntegerField(required=False, default=1000, min_value=1, max_value=1000)


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
    content_type = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        max_length=MAX_CONTENT_TYPE,
        validators=[validate_content_type],
        help_text="A media type (type/subtype), sent as the object's Content-Type.",
    )


class UploadStartSerializer(UploadUrlRequestSerializer):
    size = serializers.IntegerField(min_value=0)
    part_size = serializers.IntegerField(required=False, min_value=1)


class UploadPlanSerializer(serializers.Serializer):
    key = serializers.CharField()
    upload_id = serializers.CharField()
    part_size = serializers.IntegerField()
    part_count = serializers.IntegerField()


def _upload_id() -> serializers.CharField:
    return serializers.CharField(
        trim_whitespace=False, max_length=MAX_OPAQUE, validators=[validate_opaque("upload id")]
    )


class UploadPartsRequestSerializer(KeySerializer):
    upload_id = _upload_id()
    part_numbers = serializers.ListField(child=serializers.IntegerField(), max_length=1000)


class PresignedPartSerializer(serializers.Serializer):
    part_number = serializers.IntegerField()
    url = serializers.URLField()


class UploadPartsSerializer(serializers.Serializer):
    parts = PresignedPartSerializer(many=True)


class CompletedPartSerializer(serializers.Serializer):
    part_number = serializers.IntegerField(min_value=1, max_value=10000)
    etag = serializers.CharField(max_length=MAX_OPAQUE, validators=[validate_opaque("ETag")])


class UploadCompleteSerializer(KeySerializer):
    upload_id = _upload_id()
    parts = CompletedPartSerializer(many=True)


class UploadAbortSerializer(KeySerializer):
    upload_id = _upload_id()


class UploadedSerializer(serializers.Serializer):
    key = serializers.CharField()
    etag = serializers.CharField()


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()
