"""Every page, fragment and API route that belongs to a project: a member of another project
gets 404 and an anonymous user is sent to log in (web) or gets 401 (API).

`test_every_route_is_covered` walks the URL resolver, so a new route fails the suite until
it is added to CASES (or, if it is not project data, to PUBLIC / PERSONAL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from controlpanel.projects.models import Membership


@dataclass(frozen=True)
class Case:
    """One project-scoped route; `path` builds the URL from the owner's fixtures."""

    name: str
    path: Callable[[dict[str, Any]], str]
    methods: tuple[str, ...] = ("get",)
    api: bool = False


def _membership(ctx: dict[str, Any]) -> int:
    return Membership.objects.get(user=ctx["member"]).pk


def _job(ctx: dict[str, Any]) -> str:
    """A job of the owner's project (created directly: no backend is involved)."""
    from controlpanel.flavors.models import Flavor
    from controlpanel.workloads.models import Job

    job = Job.objects.filter(owner=ctx["owner"]).first() or Job.objects.create(
        project=Membership.objects.get(user=ctx["owner"]).project,
        owner=ctx["owner"],
        name="secret-job",
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )
    return str(job.pk)


def _job_url(suffix: str = "") -> Callable[[dict[str, Any]], str]:
    return lambda c: f"/p/alpha/jobs/{_job(c)}/{suffix}"


def _api_job_url(suffix: str = "") -> Callable[[dict[str, Any]], str]:
    return lambda c: f"/api/v1/jobs/{_job(c)}/{suffix}?project=alpha"


def _bucket(ctx: dict[str, Any]) -> str:
    """A bucket of the owner's project (a row only: access is checked before S3 is called)."""
    from controlpanel.buckets.models import Bucket

    project = Membership.objects.get(user=ctx["owner"]).project
    Bucket.objects.get_or_create(project=project, datastore="LOCAL", name="alpha-data")
    return "LOCAL/alpha-data"


def _bucket_url(suffix: str = "") -> Callable[[dict[str, Any]], str]:
    return lambda c: f"/p/alpha/buckets/{_bucket(c)}/{suffix}"


def _api_bucket_url(suffix: str = "") -> Callable[[dict[str, Any]], str]:
    return lambda c: f"/api/v1/buckets/{_bucket(c)}/{suffix}"


CASES: list[Case] = [
    Case("project-home", lambda c: "/p/alpha/"),
    Case("member-list", lambda c: "/p/alpha/members/", ("get", "post")),
    Case("member-update", lambda c: f"/p/alpha/members/{_membership(c)}/", ("post",)),
    Case("api-project-detail", lambda c: "/api/v1/projects/alpha/", ("get",), api=True),
    Case("api-member-list", lambda c: "/api/v1/projects/alpha/members/", ("get", "post"), api=True),
    Case(
        "api-member-detail",
        lambda c: f"/api/v1/projects/alpha/members/{_membership(c)}/",
        ("patch", "delete"),
        api=True,
    ),
    Case("job-list", lambda c: "/p/alpha/jobs/"),
    Case("job-new", lambda c: "/p/alpha/jobs/new/", ("get", "post")),
    Case("job-detail", _job_url()),
    Case("job-status", _job_url("status/")),
    Case("job-logs", _job_url("logs/")),
    Case("job-log-download", _job_url("logs/download/")),
    Case("job-action", _job_url("stop/"), ("post",)),
    Case("api-job-list", lambda c: "/api/v1/jobs/?project=alpha", ("get", "post"), api=True),
    Case("api-job-detail", _api_job_url(), ("get", "delete"), api=True),
    Case("api-job-stop", _api_job_url("stop/"), ("post",), api=True),
    Case("api-job-rerun", _api_job_url("rerun/"), ("post",), api=True),
    Case("api-job-retry-push", _api_job_url("retry-push/"), ("post",), api=True),
    Case("api-job-logs", _api_job_url("logs/"), ("get",), api=True),
    Case("bucket-list", lambda c: "/p/alpha/buckets/", ("get", "post")),
    Case("bucket-browse", _bucket_url()),
    Case("bucket-row", _bucket_url("row/")),
    Case("bucket-delete", _bucket_url("delete/"), ("get", "post")),
    Case("object-download", lambda c: _bucket_url("download/")(c) + "?key=a.txt"),
    Case("object-delete", _bucket_url("objects/delete/"), ("post",)),
    Case("api-bucket-list", lambda c: "/api/v1/buckets/?project=alpha", ("get", "post"), api=True),
    Case(
        "api-bucket-attach", lambda c: "/api/v1/buckets/attach/?project=alpha", ("post",), api=True
    ),
    Case("api-bucket-detail", _api_bucket_url(), ("get", "delete"), api=True),
    Case("api-object-list", _api_bucket_url("objects/"), ("get",), api=True),
    Case("api-object-delete", _api_bucket_url("objects/delete/"), ("post",), api=True),
    Case(
        "api-download-url",
        lambda c: _api_bucket_url("download-url/")(c) + "?key=a.txt",
        ("get",),
        api=True,
    ),
    Case("api-upload-url", _api_bucket_url("upload-url/"), ("post",), api=True),
    Case("api-upload-done", _api_bucket_url("upload-done/"), ("post",), api=True),
    Case("api-upload-start", _api_bucket_url("uploads/"), ("post",), api=True),
    Case("api-upload-parts", _api_bucket_url("uploads/parts/"), ("post",), api=True),
    Case("api-upload-complete", _api_bucket_url("uploads/complete/"), ("post",), api=True),
    Case("api-upload-abort", _api_bucket_url("uploads/abort/"), ("post",), api=True),
]

# Routes that hold no project data: public, or the user's own things (tested in test_accounts).
PUBLIC = {"home", "healthz", "readyz", "login", "logout", "api-schema", "api-docs", "api-root"}
PERSONAL = {
    "password_change",
    "password_change_done",
    "user-settings",
    "token-revoke",
    "api-me",
    "api-token-list",
    "api-token-detail",
    "project-create",
    "api-project-list",
    # the flavor catalogue is the same for everyone logged in
    "api-flavor-list",
    "api-flavor-detail",
    # datastore aliases and endpoints (never credentials) are site-wide: test_datastores
    "api-datastore-list",
}


def _route_names(patterns: list[Any]) -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if pattern.app_name == "admin":
                continue
            yield from _route_names(pattern.url_patterns)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield pattern.name


def test_every_route_is_covered() -> None:
    names = set(_route_names(get_resolver().url_patterns))
    covered = {case.name for case in CASES} | PUBLIC | PERSONAL
    assert names - covered == set(), "add these routes to the isolation CASES"


@pytest.fixture
def ctx(owner: Any, member: Any, outsider: Any) -> dict[str, Any]:
    return {"owner": owner, "member": member, "outsider": outsider}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_other_projects_member_gets_404(
    case: Case, ctx: dict[str, Any], outsider_client: Client, outsider_api: APIClient
) -> None:
    url = case.path(ctx)
    client = outsider_api if case.api else outsider_client
    for method in case.methods:
        response = getattr(client, method)(url, {}, **({"format": "json"} if case.api else {}))
        assert response.status_code == 404, (method, url, response.status_code)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_anonymous_is_refused(case: Case, ctx: dict[str, Any]) -> None:
    url = case.path(ctx)
    client: Client = APIClient() if case.api else Client()
    for method in case.methods:
        response = getattr(client, method)(url, {})
        if case.api:
            assert response.status_code == 401, (method, url, response.status_code)
        else:
            assert response.status_code == 302, (method, url, response.status_code)
            assert response["Location"].startswith("/login/")
            # htmx (a poll under a page whose session expired): 401 and a full-page
            # redirect, never the log-in page swapped into a fragment's place
            page = "http://testserver/p/alpha/jobs/?state=RUNNING"
            htmx = getattr(client, method)(
                url, {}, HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=page
            )
            assert htmx.status_code == 401, (method, url, htmx.status_code)
            assert htmx["HX-Redirect"] == "/login/?next=%2Fp%2Falpha%2Fjobs%2F%3Fstate%3DRUNNING"


# Routes about the project itself, not about one of its things (jobs, buckets, members).
PROJECT_LEVEL = {"project-home", "member-list", "api-project-detail", "api-member-list"}
PROJECT_LEVEL |= {"job-list", "job-new", "api-job-list", "bucket-list", "api-bucket-list"}
OWNED = [c for c in CASES if c.name not in PROJECT_LEVEL | {"api-bucket-attach"}]


@pytest.mark.parametrize("case", OWNED, ids=lambda c: c.name)
def test_another_projects_thing_under_ones_own_project_is_404(
    case: Case, ctx: dict[str, Any], outsider_client: Client, outsider_api: APIClient
) -> None:
    """The outsider names the owner's job or bucket under the outsider's own project."""
    url = case.path(ctx).replace("/p/alpha/", "/p/beta/").replace("project=alpha", "project=beta")
    url = url.replace("/projects/alpha/", "/projects/beta/")
    if case.api and "project=" not in url:
        url += ("&" if "?" in url else "?") + "project=beta"
    client = outsider_api if case.api else outsider_client
    for method in case.methods:
        response = getattr(client, method)(url, {}, **({"format": "json"} if case.api else {}))
        if case.name == "bucket-row":  # a polled row of a bucket that is gone: nothing, 200
            assert (response.status_code, response.content) == (200, b""), url
            continue
        assert response.status_code == 404, (method, url, response.status_code)
