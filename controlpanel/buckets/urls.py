"""Pages under /p/<project>/buckets/ and the API under /api/v1/ (datastores, buckets)."""

from django.urls import path, register_converter

from controlpanel.api.routes import ApiRoutes
from controlpanel.buckets import api, views


class AliasConverter:
    regex = "[A-Za-z][A-Za-z0-9_-]{0,31}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class BucketNameConverter(AliasConverter):
    regex = "[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"


register_converter(AliasConverter, "alias")
register_converter(BucketNameConverter, "bucket")

BUCKET = "<alias:datastore>/<bucket:name>"
PAGE = f"p/<slug:slug>/buckets/{BUCKET}"
API = f"buckets/{BUCKET}"

urlpatterns = [
    path("p/<slug:slug>/buckets/", views.bucket_list, name="bucket-list"),
    path(f"{PAGE}/", views.bucket_browse, name="bucket-browse"),
    path(f"{PAGE}/row/", views.bucket_row, name="bucket-row"),
    path(f"{PAGE}/recount/", views.bucket_recount, name="bucket-recount"),
    path(f"{PAGE}/delete/", views.bucket_delete, name="bucket-delete"),
    path(f"{PAGE}/download/", views.object_download, name="object-download"),
    path(f"{PAGE}/objects/delete/", views.object_delete, name="object-delete"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.view("datastores/", api.DatastoreListView.as_view(), name="api-datastore-list")
    routes.view("buckets/", api.BucketListView.as_view(), name="api-bucket-list")
    routes.view("buckets/attach/", api.BucketAttachView.as_view(), name="api-bucket-attach")
    routes.view(f"{API}/", api.BucketDetailView.as_view(), name="api-bucket-detail")
    routes.view(f"{API}/objects/", api.ObjectListView.as_view(), name="api-object-list")
    routes.view(f"{API}/objects/delete/", api.ObjectDeleteView.as_view(), name="api-object-delete")
    routes.view(f"{API}/download-url/", api.DownloadUrlView.as_view(), name="api-download-url")
    routes.view(f"{API}/upload-url/", api.UploadUrlView.as_view(), name="api-upload-url")
    routes.view(f"{API}/upload-done/", api.UploadDoneView.as_view(), name="api-upload-done")
    routes.view(f"{API}/uploads/", api.UploadStartView.as_view(), name="api-upload-start")
    routes.view(f"{API}/uploads/parts/", api.UploadPartsView.as_view(), name="api-upload-parts")
    routes.view(
        f"{API}/uploads/complete/", api.UploadCompleteView.as_view(), name="api-upload-complete"
    )
    routes.view(f"{API}/uploads/abort/", api.UploadAbortView.as_view(), name="api-upload-abort")
