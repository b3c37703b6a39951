"""Reads: datastores, a project's buckets, and folder-like listings of their objects.

`datastore_config(alias)` is THE way the rest of the panel (jobs, notebooks, tasks) gets a
datastore's connection settings; nothing else reads credentials.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404

from controlpanel.buckets.models import Bucket, BucketGrant, Datastore
from controlpanel.projects.models import Project
from storage import objects
from storage.datastore import DatastoreConfig


class DatastoreNotFound(LookupError):
    """No datastore has this alias (neither the default one nor an admin-added one)."""

    def __init__(self, alias: str) -> None:
        super().__init__(f"no datastore is named {alias!r}")
        self.alias = alias


@dataclass(frozen=True)
class DatastoreInfo:
    """What members may know about a datastore: never its credentials.
    `public_endpoint_url` is "" when browsers reach it at `endpoint_url`."""

    alias: str
    endpoint_url: str
    region: str
    is_default: bool
    public_endpoint_url: str = ""

    @property
    def browser_endpoint_url(self) -> str:
        return self.public_endpoint_url or self.endpoint_url


def datastore_config(alias: str) -> DatastoreConfig:
    """The connection settings of the datastore named `alias`, for code that talks to S3
    (storage.*, volume pulls and pushes, pod environments via `DatastoreConfig.to_env()`).

    The default datastore (S3_ALIAS, from the S3_* settings) wins over a stored one of the
    same alias. Raises DatastoreNotFound for an unknown alias. Never log or render the result:
    it carries the secret key.
    """
    if alias == settings.S3_ALIAS and settings.S3_ENDPOINT_URL:
        return DatastoreConfig(
            alias=alias,
            endpoint_url=settings.S3_ENDPOINT_URL,
            region=settings.S3_REGION,
            access_key=settings.S3_ACCESS_KEY,
            secret_key=settings.S3_SECRET_KEY,
            public_endpoint_url=settings.S3_PUBLIC_ENDPOINT_URL,
            pod_endpoint_url=settings.S3_POD_ENDPOINT_URL,
        )
    datastore = Datastore.objects.filter(alias=alias).first()
    if datastore is None:
        raise DatastoreNotFound(alias)
    return datastore.config()


def default_datastore_alias() -> str | None:
    """The alias new buckets go to when none is named: S3_ALIAS if configured, else the
    first stored datastore."""
    if settings.S3_ENDPOINT_URL:
        return str(settings.S3_ALIAS)
    return Datastore.objects.values_list("alias", flat=True).first()


def datastore_list() -> list[DatastoreInfo]:
    """Every datastore, the default first; aliases, endpoints and regions only."""
    found: list[DatastoreInfo] = []
    if settings.S3_ENDPOINT_URL:
        found.append(
            DatastoreInfo(
                settings.S3_ALIAS,
                settings.S3_ENDPOINT_URL,
                settings.S3_REGION,
                True,
                settings.S3_PUBLIC_ENDPOINT_URL,
            )
        )
    rows = Datastore.objects.all()
    if found:  # the settings' datastore hides a stored one of the same alias
        rows = rows.exclude(alias=settings.S3_ALIAS)
    found.extend(
        DatastoreInfo(r.alias, r.endpoint_url, r.region, False, r.public_endpoint_url) for r in rows
    )
    return found


def datastore_origins() -> list[str]:
    """`scheme://host[:port]` of every datastore's public endpoint: where browsers PUT and
    GET objects (the page's CSP connect-src must allow them)."""
    origins = []
    for info in datastore_list():
        parts = urlsplit(info.browser_endpoint_url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if parts.scheme in ("http", "https") and parts.netloc and origin not in origins:
            origins.append(origin)
    return origins


def buckets_for_project(*, project: Project) -> QuerySet[Bucket]:
    return Bucket.objects.filter(project=project).select_related("created_by").order_by("name")


def grants_to_attach(*, project: Project) -> QuerySet[BucketGrant]:
    """Existing buckets an admin granted to the project that it has not attached (yet)."""
    attached = Bucket.objects.filter(
        project=project, datastore=OuterRef("datastore"), name=OuterRef("name")
    )
    return (
        BucketGrant.objects.filter(project=project)
        .exclude(Exists(attached))
        .select_related("granted_by")
        .order_by("datastore", "name")
    )


def project_bucket(*, project: Project, datastore: str, name: str) -> Bucket | None:
    """The project's bucket `name@datastore`, or None (e.g. to check a job's volume spec
    names a bucket of its own project)."""
    return Bucket.objects.filter(project=project, datastore=datastore, name=name).first()


def bucket_get(*, project: Project, datastore: str, name: str) -> Bucket:
    """Like project_bucket, but 404 when the project does not own that bucket."""
    bucket = project_bucket(project=project, datastore=datastore, name=name)
    if bucket is None:
        raise Http404("No such bucket in this project.")
    return bucket


def bucket_config(*, bucket: Bucket) -> DatastoreConfig:
    return datastore_config(bucket.datastore)


def bucket_usage(*, bucket: Bucket) -> objects.BucketStats:
    """Object count and total size, counted now (streams the whole listing)."""
    return objects.bucket_stats(bucket_config(bucket=bucket), bucket=bucket.name)


def object_page(
    *,
    bucket: Bucket,
    prefix: str = "",
    token: str | None = None,
    page_size: int = 100,
    delimiter: str = "/",
) -> objects.ListPage:
    """One page of the objects under `prefix`, folded into folders at `delimiter`."""
    return objects.list_objects(
        bucket_config(bucket=bucket),
        bucket=bucket.name,
        prefix=prefix,
        delimiter=delimiter,
        token=token or None,
        page_size=page_size,
    )


def object_info(*, bucket: Bucket, key: str) -> objects.ObjectInfo:
    return objects.head_object(bucket_config(bucket=bucket), bucket=bucket.name, key=key)
