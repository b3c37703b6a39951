"""REST API: datastores, a project's buckets, their objects and presigned transfers.

Bucket routes name a bucket by `<datastore>/<name>`; the bucket's project is then checked
with the same access helper as every page (404 outside it), so a presigned URL is only ever
signed for the caller's own project's buckets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from controlpanel.api.scoping import api_project
from controlpanel.buckets import selectors, services, transfers
from controlpanel.buckets import serializers as s
from controlpanel.buckets.models import Bucket
from controlpanel.projects.access import ProjectAccess
from storage.errors import (
    BucketNotFound,
    InvalidPart,
    ObjectNotFound,
    StorageError,
    StorageUnavailable,
    UploadNotFound,
)
from storage.presign import CompletedPart

PROJECT_PARAM = OpenApiParameter("project", str, description="Project slug (else your only one).")


class StorageFailed(exceptions.APIException):
    status_code = 502
    default_detail = "The datastore failed."
    default_code = "storage_error"


class StorageDown(exceptions.APIException):
    status_code = 503
    default_detail = "The datastore is unreachable."
    default_code = "storage_unavailable"


class Conflict(exceptions.APIException):
    status_code = 409
    default_code = "conflict"


class StorageAPIView(APIView):
    """Datastore failures answer 400/404/409/502/503 with a JSON detail, never a 500."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, ObjectNotFound | BucketNotFound):
            exc = exceptions.NotFound(exc.message)
        elif isinstance(exc, UploadNotFound):
            exc = exceptions.NotFound(
                "No such upload: this upload id was never started, or was completed or "
                "aborted already."
            )
        elif isinstance(exc, InvalidPart):
            exc = exceptions.ValidationError({"parts": [exc.message]})
        elif isinstance(exc, StorageUnavailable):
            exc = StorageDown()
        elif isinstance(exc, StorageError):
            exc = StorageFailed(exc.message)
        elif isinstance(exc, selectors.DatastoreNotFound):
            exc = StorageFailed(f"The datastore {exc.alias} is no longer configured.")
        elif isinstance(exc, services.BucketNotEmptyError):
            exc = Conflict(str(exc))
        elif isinstance(exc, DjangoPermissionDenied):
            exc = exceptions.PermissionDenied(str(exc))
        return super().handle_exception(exc)


def _scoped_bucket(request: Request, datastore: str, name: str) -> tuple[ProjectAccess, Bucket]:
    """The bucket and the caller's access to its project (404 unless the caller is in it)."""
    bucket = Bucket.objects.filter(datastore=datastore, name=name).select_related("project")
    found = bucket.first()
    if found is None:
        raise Http404("No such bucket.")
    return api_project(request, slug=found.project.slug), found


def _bucket(request: Request, datastore: str, name: str) -> Bucket:
    return _scoped_bucket(request, datastore, name)[1]


def _valid(serializer_class: type, data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class DatastoreListView(StorageAPIView):
    """Datastores buckets can live on (aliases, endpoints, regions); admins add them."""

    @extend_schema(responses=s.DatastoreSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(s.DatastoreSerializer(selectors.datastore_list(), many=True).data)

    @extend_schema(
        request=s.DatastoreCreateSerializer, responses={201: s.DatastoreCreateSerializer}
    )
    def post(self, request: Request) -> Response:
        if not request.user.is_staff:
            raise exceptions.PermissionDenied("Only site admins can add datastores.")
        data = _valid(s.DatastoreCreateSerializer, request.data)
        datastore = services.datastore_create(by=request.user, **data)
        body = s.DatastoreCreateSerializer(datastore).data
        return Response(body, status=status.HTTP_201_CREATED)


class BucketListView(generics.ListAPIView, StorageAPIView):
    """Your project's buckets (`?project=`); POST creates one on a datastore."""

    serializer_class = s.BucketSerializer

    def get_queryset(self) -> QuerySet[Bucket]:
        if getattr(self, "swagger_fake_view", False):
            return Bucket.objects.none()
        return selectors.buckets_for_project(project=api_project(self.request).project)

    @extend_schema(parameters=[PROJECT_PARAM])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.list(request, *args, **kwargs)

    @extend_schema(
        request=s.BucketCreateSerializer,
        responses={201: s.BucketSerializer},
        parameters=[PROJECT_PARAM],
    )
    def post(self, request: Request) -> Response:
        return _add(request, services.bucket_create)


class BucketAttachView(StorageAPIView):
    """Attach an existing bucket of a datastore to your project (after an access check)."""

    @extend_schema(
        request=s.BucketCreateSerializer,
        responses={201: s.BucketSerializer},
        parameters=[PROJECT_PARAM],
    )
    def post(self, request: Request) -> Response:
        return _add(request, services.bucket_attach)


def _add(request: Request, action: Callable[..., Bucket]) -> Response:
    access = api_project(request)
    data = _valid(s.BucketCreateSerializer, request.data)
    bucket = action(
        access=access, by=request.user, name=data["name"], datastore=data.get("datastore") or None
    )
    return Response(s.BucketSerializer(bucket).data, status=status.HTTP_201_CREATED)


class BucketDetailView(StorageAPIView):
    """One bucket. DELETE refuses a non-empty bucket (409) unless `?empty=true`, which
    empties it in the background (202; poll this URL until it answers 404)."""

    @extend_schema(
        responses=s.BucketSerializer,
        parameters=[OpenApiParameter("refresh", bool, description="Count objects and bytes now.")],
    )
    def get(self, request: Request, datastore: str, name: str) -> Response:
        bucket = _bucket(request, datastore, name)
        if request.query_params.get("refresh") in ("1", "true"):
            services.bucket_refresh_stats(bucket_id=bucket.pk)
            bucket.refresh_from_db()
        return Response(s.BucketSerializer(bucket).data)

    @extend_schema(
        responses={204: None, 202: s.BucketSerializer, 409: s.DetailSerializer},
        parameters=[
            OpenApiParameter(
                "empty",
                bool,
                description=("Delete every object first (the bucket is deleted once empty)."),
            )
        ],
    )
    def delete(self, request: Request, datastore: str, name: str) -> Response:
        access, bucket = _scoped_bucket(request, datastore, name)
        empty = request.query_params.get("empty") in ("1", "true")
        if services.bucket_delete(access=access, bucket=bucket, empty=empty):
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(s.BucketSerializer(bucket).data, status=status.HTTP_202_ACCEPTED)


class ObjectListView(StorageAPIView):
    """One page of objects under `prefix`, folded into `prefixes` at `delimiter` ('/' by
    default; empty for a flat listing). Pass `next_token` back as `token`."""

    @extend_schema(responses=s.ObjectPageSerializer, parameters=[s.ObjectListQuerySerializer])
    def get(self, request: Request, datastore: str, name: str) -> Response:
        bucket = _bucket(request, datastore, name)
        query = _valid(s.ObjectListQuerySerializer, request.query_params)
        page = selectors.object_page(
            bucket=bucket,
            prefix=query["prefix"],
            token=query["token"] or None,
            delimiter=query["delimiter"],
            page_size=query["limit"],
        )
        return Response(s.ObjectPageSerializer(page).data)


class ObjectDeleteView(StorageAPIView):
    """Delete up to 1,000 keys, and folders (every object under each prefix)."""

    @extend_schema(request=s.ObjectDeleteSerializer, responses=s.ObjectDeleteResultSerializer)
    def post(self, request: Request, datastore: str, name: str) -> Response:
        bucket = _bucket(request, datastore, name)
        data = _valid(s.ObjectDeleteSerializer, request.data)
        result = services.objects_delete(
            bucket=bucket, keys=data["keys"], prefixes=data["prefixes"]
        )
        errors = [{"key": e.key, "code": e.code, "message": e.message} for e in result.errors]
        return Response({"deleted": result.deleted, "errors": errors})


class DownloadUrlView(StorageAPIView):
    """A presigned GET URL for one object (404 if it does not exist)."""

    @extend_schema(
        responses=s.UrlSerializer, parameters=[OpenApiParameter("key", str, required=True)]
    )
    def get(self, request: Request, datastore: str, name: str) -> Response:
        bucket = _bucket(request, datastore, name)
        key = request.query_params.get("key", "")
        if not key:
            raise ValidationError({"key": "Name the object with ?key=."})
        url = transfers.download_url(bucket=bucket, key=key)
        return Response({"url": url, "expires_in": transfers.URL_LIFETIME_S})


class UploadThrottle(BaseThrottle):
    """UPLOADS_PER_HOUR uploads started (single PUT or multipart) per user and clock hour,
    counted in Redis so every web process shares the count; past it, 429 until the hour ends."""

    def allow_request(self, request: Request, view: APIView) -> bool:
        limit = settings.UPLOADS_PER_HOUR
        if not limit:
            return True
        now = time.time()
        key = f"uploads:{request.user.pk}:{int(now // 3600)}"
        cache.add(key, 0, timeout=3700)
        self.retry_after = 3600 - now % 3600
        return cache.incr(key) <= limit

    def wait(self) -> float:
        return self.retry_after


class UploadStartingView(StorageAPIView):
    """A view that starts an upload: the API's throttles, and the uploads' own."""

    def get_throttles(self) -> list[BaseThrottle]:
        return [*super().get_throttles(), UploadThrottle()]


class UploadUrlView(UploadStartingView):
    """A presigned PUT URL for a small file in one request."""

    @extend_schema(request=s.UploadUrlRequestSerializer, responses=s.UrlSerializer)
    def post(self, request: Request, datastore: str, name: str) -> Response:
        bucket = _bucket(request, datastore, name)
        data = _valid(s.UploadUrlRequestSerializer, request.data)
        url = transfers.upload_url(
            bucket=bucket, key=data["key"], content_type=data["content_type"]
        )
        return Response({"url": url, "expires_in": transfers.URL_LIFETIME_S})


class UploadDoneView(StorageAPIView):
    """Tell the panel a single-PUT upload finished (it recounts the bucket's usage)."""

    @extend_schema(request=s.KeySerializer, responses={204: None})
    def post(self, request: Request, datastore: str, name: str) -> Response:
        transfers.upload_done(bucket=_bucket(request, datastore, name))
        return Response(status=status.HTTP_204_NO_CONTENT)


class UploadStartView(UploadStartingView):
    """Start a multipart upload: returns its id and how to cut the file into parts."""

    @extend_schema(request=s.UploadStartSerializer, responses={201: s.UploadPlanSerializer})
    def post(self, request: Request, datastore: str, name: str) -> Response:
        bucket = _bucket(request, datastore, name)
        data = _valid(s.UploadStartSerializer, request.data)
        plan = transfers.upload_start(bucket=bucket, **data)
        return Response(s.UploadPlanSerializer(plan).data, status=status.HTTP_201_CREATED)


class UploadPartsView(StorageAPIView):
    """Presigned PUT URLs for parts of a multipart upload (the ETag header of each PUT's
    answer is needed to complete)."""

    @extend_schema(request=s.UploadPartsRequestSerializer, responses=s.UploadPartsSerializer)
    def post(self, request: Request, datastore: str, name: str) -> Response:
        bucket = _bucket(request, datastore, name)
        data = _valid(s.UploadPartsRequestSerializer, request.data)
        parts = transfers.upload_parts(bucket=bucket, **data)
        return Response(s.UploadPartsSerializer({"parts": parts}).data)


class UploadCompleteView(StorageAPIView):
    """Assemble the uploaded parts into the object."""

    @extend_schema(request=s.UploadCompleteSerializer, responses=s.UploadedSerializer)
    def post(self, request: Request, datastore: str, name: str) -> Response:
        bucket = _bucket(request, datastore, name)
        data = _valid(s.UploadCompleteSerializer, request.data)
        parts = [CompletedPart(p["part_number"], p["etag"]) for p in data["parts"]]
        etag = transfers.upload_complete(
            bucket=bucket, key=data["key"], upload_id=data["upload_id"], parts=parts
        )
        return Response({"key": data["key"], "etag": etag})


class UploadAbortView(StorageAPIView):
    """Cancel a multipart upload (its parts are dropped)."""

    @extend_schema(request=s.UploadAbortSerializer, responses={204: None})
    def post(self, request: Request, datastore: str, name: str) -> Response:
        bucket = _bucket(request, datastore, name)
        data = _valid(s.UploadAbortSerializer, request.data)
        transfers.upload_abort(bucket=bucket, **data)
        return Response(status=status.HTTP_204_NO_CONTENT)
