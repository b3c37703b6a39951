"""Web pages: the bucket list, the object browser, bucket deletion and downloads.

Every view starts with `project_view()` (404 outside the project) and then resolves the
bucket within `request.access.project`. htmx requests get the page's fragment only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from controlpanel.buckets import selectors, services, transfers
from controlpanel.buckets.csp import allow_datastores
from controlpanel.buckets.forms import BucketForm, DeleteBucketForm
from controlpanel.buckets.listing import build_listing
from controlpanel.buckets.models import Bucket, BucketState
from controlpanel.core.htmx import wants_fragment
from controlpanel.projects.access import ProjectRequest, project_view
from storage.errors import ObjectNotFound, StorageError, StorageUnavailable

STALE_STATS = timedelta(minutes=5)


def storage_errors(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A datastore failure shows as a page saying so (502/503), not a server error."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except selectors.DatastoreNotFound as missing:
            error = StorageError(f"The datastore {missing.alias} is no longer configured.")
            return render(request, "buckets/error.html", {"error": error}, status=502)
        except StorageError as error:
            status = 503 if isinstance(error, StorageUnavailable) else 502
            if isinstance(error, ObjectNotFound):
                status = 404
            return render(request, "buckets/error.html", {"error": error}, status=status)

    return wrapper


def _render(
    request: HttpRequest, template: str, partial: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    name = f"{template}#{partial}" if wants_fragment(request) else template
    response = render(request, name, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _bucket(request: ProjectRequest, datastore: str, name: str) -> Bucket:
    return selectors.bucket_get(
        project=request.access.project,
        datastore=datastore,
        name=name,
    )


@require_http_methods(["GET", "POST"])
@project_view()
@storage_errors
def bucket_list(request: ProjectRequest) -> HttpResponse:
    access = request.access
    form = BucketForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        action = services.bucket_attach if data["action"] == "attach" else services.bucket_create
        try:
            bucket = action(
                access=access, by=request.user, name=data["name"], datastore=data["datastore"]
            )
        except ValidationError as error:
            _form_errors(form, error)
        except services.BucketNotGranted as error:
            # A form error (400, which htmx swaps in) beside the name; the API answers 403.
            form.add_error("name", str(error))
        else:
            verb = "attached" if data["action"] == "attach" else "created"
            messages.success(request, f"Bucket {bucket.name} {verb}.")
            return redirect("bucket-list", slug=access.project.slug)
    buckets = list(selectors.buckets_for_project(project=access.project))
    _refresh_stale(buckets)
    context = {
        "project": access.project,
        "buckets": buckets,
        "grants": list(selectors.grants_to_attach(project=access.project)),
        "form": form,
    }
    return _render(
        request, "buckets/list.html", "panel", context, status=400 if form.errors else 200
    )


def _form_errors(form: BucketForm, error: ValidationError) -> None:
    if hasattr(error, "error_dict"):
        for field_name, errors in error.message_dict.items():
            form.add_error(field_name if field_name in form.fields else None, errors)
    else:
        form.add_error(None, error)


def _refresh_stale(buckets: list[Bucket]) -> None:
    """Usage figures older than a few minutes are recounted in the background."""
    old = timezone.now() - STALE_STATS
    for bucket in buckets:
        if not bucket.is_busy and (bucket.stats_at is None or bucket.stats_at < old):
            services.bucket_stats_request(bucket=bucket)


@require_GET
@project_view()
def bucket_row(request: ProjectRequest, datastore: str, name: str) -> HttpResponse:
    """One row of the list, polled while it is being emptied or counted; a bucket that is
    gone (emptied and deleted) answers nothing, which removes the row."""
    bucket = selectors.project_bucket(
        project=request.access.project,
        datastore=datastore,
        name=name,
    )
    if bucket is None:
        return HttpResponse("")
    return _row(request, bucket, _since(request.GET.get("since")))


def _since(value: str | None) -> float | None:
    """`?since=` (a Unix time): the row waits for a count made after it."""
    try:
        since = float(value or "")
    except ValueError:
        return None
    return since if math.isfinite(since) else None


def _row(request: HttpRequest, bucket: Bucket, since: float | None) -> HttpResponse:
    """The row; with `since`, it polls until a count newer than that is in (for as long as a
    queued recount may take: a lost task does not keep the page polling forever)."""
    now = timezone.now().timestamp()
    waiting = (
        since is not None
        and now - since < services.STATS_PENDING_TTL_S
        and bucket.state == BucketState.READY
        and (bucket.stats_at is None or bucket.stats_at.timestamp() < since)
    )
    context = {
        "bucket": bucket,
        "project": bucket.project,
        "recount_since": since if waiting else None,
    }
    return render(request, "buckets/list.html#row", context)


@require_POST
@project_view()
def bucket_recount(request: ProjectRequest, datastore: str, name: str) -> HttpResponse:
    """Count the bucket's objects and bytes again (in the background): htmx gets the row, which
    says so and polls until the new count is in; without JS, back to the list."""
    bucket = _bucket(request, datastore, name)
    asked = timezone.now().timestamp()
    if bucket.state == BucketState.READY:
        services.bucket_stats_recount(bucket=bucket)
    if wants_fragment(request):
        return _row(request, bucket, asked)
    messages.info(request, f"Counting {bucket.name} again: reload in a moment for the figures.")
    return redirect("bucket-list", slug=bucket.project.slug)


@require_GET
@project_view()
@storage_errors
@allow_datastores
def bucket_browse(request: ProjectRequest, datastore: str, name: str) -> HttpResponse:
    bucket = _bucket(request, datastore, name)
    listing = build_listing(bucket=bucket, params=request.GET)
    context = {
        "project": bucket.project,
        "bucket": bucket,
        "listing": listing,
        "api_base": reverse("api-bucket-detail", kwargs={"datastore": datastore, "name": name}),
    }
    return _render(request, "buckets/browse.html", "listing", context)


@require_http_methods(["GET", "POST"])
@project_view()
@storage_errors
def bucket_delete(request: ProjectRequest, datastore: str, name: str) -> HttpResponse:
    access = request.access
    bucket = _bucket(request, datastore, name)
    form = DeleteBucketForm(request.POST if request.method == "POST" else None)
    not_empty = False
    if request.method == "POST" and form.is_valid():
        try:
            gone = services.bucket_delete(
                access=access, bucket=bucket, empty=form.cleaned_data["empty"]
            )
        except services.BucketNotEmptyError:
            not_empty = True
        except ValidationError as error:
            form.add_error(None, error)
        else:
            verb = "detached" if bucket.origin == "attached" else "deleted"
            text = (
                f"Bucket {bucket.name} {verb}."
                if gone
                else (f"Emptying {bucket.name}; it is deleted once empty.")
            )
            messages.success(request, text)
            return redirect("bucket-list", slug=access.project.slug)
    context = {"project": access.project, "bucket": bucket, "form": form, "not_empty": not_empty}
    return render(
        request,
        "buckets/delete.html",
        context,
        status=409 if not_empty else 400 if form.errors else 200,
    )


@require_GET
@project_view()
@storage_errors
def object_download(request: ProjectRequest, datastore: str, name: str) -> HttpResponse:
    """Redirect to a short-lived presigned URL: the bytes never pass through Django."""
    bucket = _bucket(request, datastore, name)
    key = request.GET.get("key", "")
    if not key:
        return HttpResponse("Name the object with ?key=.", status=400)
    try:
        return HttpResponseRedirect(transfers.download_url(bucket=bucket, key=key))
    except ValidationError as error:
        return HttpResponse(" ".join(error.messages), status=400, content_type="text/plain")


@require_POST
@project_view()
@storage_errors
def object_delete(request: ProjectRequest, datastore: str, name: str) -> HttpResponse:
    bucket = _bucket(request, datastore, name)
    # Ticked objects (`key`) and folders (`folder`), and the folder shown (`prefix`).
    prefix = request.POST.get("prefix", "")
    keys = [key for key in request.POST.getlist("key") if key]
    folders = [folder for folder in request.POST.getlist("folder") if folder]
    try:
        result = services.objects_delete(bucket=bucket, keys=keys, prefixes=folders)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        text = f"Deleted {len(result.deleted)} object{'s' if len(result.deleted) != 1 else ''}."
        if result.errors:
            text += f" {len(result.errors)} could not be deleted."
        messages.success(request, text)
    url = reverse(
        "bucket-browse", kwargs={"slug": bucket.project.slug, "datastore": datastore, "name": name}
    )
    return redirect(url + ("?" + urlencode({"prefix": prefix}) if prefix else ""))
