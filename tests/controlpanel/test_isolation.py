"""Every page, fragment and API route that belongs to a project: a member of another project
gets 404 and an anonymous user is sent to log in (web) or gets 401 (API), while the project's
manager, sending the same kind of request, gets the real answer about that very object (so a
route that answers 404 to everyone fails here too).

`test_every_route_is_covered` walks the URL resolver, so a new route fails the suite until
it is added to CASES (or, if it is not project data, to PUBLIC / PERSONAL).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from controlpanel.projects.models import Membership
from storage.datastore import DatastoreConfig
from storage.errors import BucketNotFound
from storage.objects import create_bucket, delete_bucket, put_object
from storage.presign import create_multipart_upload, presign_upload_parts
from tests.fixtures.jobs import put_dataset, put_weights


@dataclass(frozen=True)
class Case:
    """One project-scoped route; `path` builds the URL from the owner's fixtures."""

    name: str
    path: Callable[[dict[str, Any]], str]
    methods: tuple[str, ...] = ("get",)
    api: bool = False


def _membership(ctx: dict[str, Any]) -> int:
    return Membership.objects.get(user=ctx["member"]).pk


def _invitation(ctx: dict[str, Any]) -> str:
    """A pending invitation to the owner's project."""
    from datetime import timedelta

    from django.utils import timezone

    from controlpanel.accounts.models import Invitation

    project = Membership.objects.get(user=ctx["owner"]).project
    invitation = Invitation.objects.filter(project=project).first() or Invitation.objects.create(
        project=project,
        email="invited@example.com",
        digest="0" * 64,
        expires_at=timezone.now() + timedelta(days=1),
    )
    return f"/p/alpha/invitations/{invitation.pk}/revoke/"


def _job(ctx: dict[str, Any]) -> str:
    """A job of the owner's project (created directly: no backend is involved)."""
    from controlpanel.flavors.models import Flavor
    from controlpanel.jobs.models import Job

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


def _usage_url(ctx: dict[str, Any]) -> str:
    """Usage of the owner's project: a run of its job, this month (its lines are written as
    it is saved)."""
    from datetime import timedelta

    from django.utils import timezone

    from controlpanel.billing.rules import month_of, month_start
    from controlpanel.engine.models import JobRun
    from controlpanel.jobs.models import Job

    job = Job.objects.get(pk=_job(ctx))
    if not JobRun.objects.filter(job=job).exists():
        now = timezone.now()
        JobRun.objects.create(
            uid="usage-run",
            job=job,
            project=job.project,
            run=1,
            flavor=job.flavor,
            units=1,
            started_at=max(now - timedelta(minutes=5), month_start(month_of(now))),
            finished_at=now,
        )
    return "/api/v1/usage/?project=alpha"


def _notebook(ctx: dict[str, Any]) -> str:
    """A notebook of the owner's project (a row, STARTING: no backend is involved)."""
    from controlpanel.flavors.models import Flavor
    from controlpanel.notebooks.models import Notebook

    notebook = Notebook.objects.filter(owner=ctx["owner"]).first() or Notebook.objects.create(
        project=Membership.objects.get(user=ctx["owner"]).project,
        owner=ctx["owner"],
        name="secret-notebook",
        image="quay.io/jupyter/minimal-notebook:python-3.12",
        params={"image": "python"},
        editor="jupyterlab",
        state="STARTING",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )
    return str(notebook.pk)


def _notebook_url(suffix: str = "") -> Callable[[dict[str, Any]], str]:
    return lambda c: f"/p/alpha/notebooks/{_notebook(c)}/{suffix}"


def _api_notebook(ctx: dict[str, Any]) -> Any:
    """A notebook of the owner's project, RUNNING (a row only: no backend is involved)."""
    from controlpanel.flavors.models import Flavor
    from controlpanel.notebooks.models import Notebook

    notebook = Notebook.objects.filter(owner=ctx["owner"], name="api-notebook").first()
    return notebook or Notebook.objects.create(
        project=Membership.objects.get(user=ctx["owner"]).project,
        owner=ctx["owner"],
        name="api-notebook",
        image="x/nb:1",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state="RUNNING",
    )


def _api_notebook_url(suffix: str = "") -> Callable[[dict[str, Any]], str]:
    return lambda c: f"/api/v1/notebooks/{_api_notebook(c).pk}/{suffix}?project=alpha"


def _app(ctx: dict[str, Any]) -> str:
    """An app of the owner's project (a row, QUEUED: no backend is involved)."""
    from controlpanel.flavors.models import Flavor
    from controlpanel.served.models import App

    app = App.objects.filter(owner=ctx["owner"]).first() or App.objects.create(
        project=Membership.objects.get(user=ctx["owner"]).project,
        owner=ctx["owner"],
        name="secret-app",
        image="x/serve:1",
        params={"model": "alpha-data@LOCAL/tiny", "model_name": "secret-app"},
        volumes=["alpha-data@LOCAL/tiny:/workspace/model:ro"],
        state="QUEUED",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )
    return str(app.pk)


def _app_url(suffix: str = "") -> Callable[[dict[str, Any]], str]:
    return lambda c: f"/p/alpha/apps/{_app(c)}/{suffix}"


def _api_app_url(suffix: str = "") -> Callable[[dict[str, Any]], str]:
    return lambda c: f"/api/v1/apps/{_app(c)}/{suffix}?project=alpha"


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


def _secret(ctx: dict[str, Any]) -> str:
    """A secret of the owner's project (its value must never show anywhere)."""
    from controlpanel.projects.models import ProjectSecret

    project = Membership.objects.get(user=ctx["owner"]).project
    ProjectSecret.objects.get_or_create(
        project=project, name="ALPHA_TOKEN", defaults={"value": "alpha-secret-value"}
    )
    return "ALPHA_TOKEN"


def _app_token(ctx: dict[str, Any]) -> str:
    """An app-only token of the owner's project (its raw value is never shown again)."""
    from controlpanel.accounts.models import AppToken

    project = Membership.objects.get(user=ctx["owner"]).project
    token, _ = AppToken.objects.get_or_create(
        project=project, name="ci", defaults={"digest": "0" * 64, "hint": "aja_000000"}
    )
    return str(token.pk)


def _sweep(ctx: dict[str, Any]) -> str:
    """A sweep of the owner's project with one trial (rows only: no task runs here)."""
    from controlpanel.jobs.models import Job
    from controlpanel.sweeps.models import Adapter, Sweep, Trial

    project = Membership.objects.get(user=ctx["owner"]).project
    sweep = Sweep.objects.filter(project=project).first()
    if sweep is None:
        spec = _job_spec(ctx) | {"name": "secret-sweep"}
        sweep = Sweep.objects.create(
            project=project,
            owner=ctx["owner"],
            name="secret-sweep",
            base=spec,
            space={"learning_rate": {"values": [1e-4, 1e-3]}},
            sampler="grid",
            max_trials=2,
            parallel=1,
        )
        job = Job.objects.get(pk=_job(ctx))
        Trial.objects.create(sweep=sweep, number=0, job=job, params={"learning_rate": 1e-4})
        Adapter.objects.create(
            project=project,
            job=job,
            run=1,
            name="secret-adapter",
            base_model="org/tiny",
            location="alpha-data@LOCAL/runs/adapter",
        )
    return str(sweep.pk)


def _adapter(ctx: dict[str, Any]) -> int:
    from controlpanel.sweeps.models import Adapter

    _sweep(ctx)
    return Adapter.objects.get(name="secret-adapter").pk


CASES: list[Case] = [
    Case("project-home", lambda c: "/p/alpha/"),
    Case("project-settings", lambda c: "/p/alpha/settings/", ("get", "post")),
    Case("first-run-dismiss", lambda c: "/p/alpha/first-run/dismiss/", ("post",)),
    Case("project-secrets", lambda c: "/p/alpha/secrets/", ("post",)),
    Case(
        "api-secret-list",
        lambda c: _secret(c) and "/api/v1/projects/alpha/secrets/",
        ("get", "post"),
        api=True,
    ),
    Case(
        "api-secret-detail",
        lambda c: f"/api/v1/projects/alpha/secrets/{_secret(c)}/",
        ("delete",),
        api=True,
    ),
    Case(
        "api-app-token-list",
        lambda c: _app_token(c) and "/api/v1/projects/alpha/app-tokens/",
        ("get", "post"),
        api=True,
    ),
    Case(
        "api-app-token-detail",
        lambda c: f"/api/v1/projects/alpha/app-tokens/{_app_token(c)}/",
        ("delete",),
        api=True,
    ),
    Case("member-list", lambda c: "/p/alpha/members/", ("get", "post")),
    Case("member-update", lambda c: f"/p/alpha/members/{_membership(c)}/", ("post",)),
    Case("member-invite", lambda c: "/p/alpha/members/invite/", ("post",)),
    Case("invitation-revoke", _invitation, ("post",)),
    Case("api-project-detail", lambda c: "/api/v1/projects/alpha/", ("get", "patch"), api=True),
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
    Case("notebook-list", lambda c: "/p/alpha/notebooks/"),
    Case("notebook-new", lambda c: "/p/alpha/notebooks/new/", ("get", "post")),
    Case("notebook-detail", _notebook_url()),
    Case("notebook-status", _notebook_url("status/")),
    Case("notebook-logs", _notebook_url("logs/")),
    Case("notebook-log-download", _notebook_url("logs/download/")),
    Case("notebook-open", _notebook_url("open/")),
    Case("notebook-action", _notebook_url("stop/"), ("post",)),
    Case("app-list", lambda c: _app(c) and "/p/alpha/apps/"),
    Case("app-new", lambda c: f"/p/alpha/apps/new/?from_job={_job(c)}", ("get", "post")),
    Case("app-detail", _app_url()),
    Case("app-status", _app_url("status/")),
    Case("app-logs", _app_url("logs/")),
    Case("app-log-download", _app_url("logs/download/")),
    Case("app-try", _app_url("try/"), ("post",)),
    Case("app-action", _app_url("stop/"), ("post",)),
    Case(
        "api-app-list",
        lambda c: _app(c) and "/api/v1/apps/?project=alpha",
        ("get", "post"),
        api=True,
    ),
    Case("api-app-detail", _api_app_url(), ("get", "delete"), api=True),
    Case("api-app-start", _api_app_url("start/"), ("post",), api=True),
    Case("api-app-stop", _api_app_url("stop/"), ("post",), api=True),
    Case("api-app-logs", _api_app_url("logs/"), ("get",), api=True),
    Case("api-job-list", lambda c: "/api/v1/jobs/?project=alpha", ("get", "post"), api=True),
    Case("api-job-detail", _api_job_url(), ("get", "delete"), api=True),
    Case("api-job-stop", _api_job_url("stop/"), ("post",), api=True),
    Case("api-job-rerun", _api_job_url("rerun/"), ("post",), api=True),
    Case("api-job-retry-push", _api_job_url("retry-push/"), ("post",), api=True),
    Case("api-job-logs", _api_job_url("logs/"), ("get",), api=True),
    Case(
        "api-notebook-list",
        lambda c: _api_notebook_url()(c) and "/api/v1/notebooks/?project=alpha",
        ("get", "post"),
        api=True,
    ),
    Case("api-notebook-detail", _api_notebook_url(), ("get", "delete"), api=True),
    Case("api-notebook-start", _api_notebook_url("start/"), ("post",), api=True),
    Case("api-notebook-stop", _api_notebook_url("stop/"), ("post",), api=True),
    Case("api-notebook-keep-alive", _api_notebook_url("keep-alive/"), ("post",), api=True),
    Case("api-notebook-logs", _api_notebook_url("logs/"), ("get",), api=True),
    Case("api-notebook-shares", _api_notebook_url("shares/"), ("get",), api=True),
    Case("api-notebook-share", _api_notebook_url("share/"), ("post",), api=True),
    Case("api-notebook-unshare", _api_notebook_url("unshare/"), ("post",), api=True),
    Case("bucket-list", lambda c: "/p/alpha/buckets/", ("get", "post")),
    Case("bucket-browse", _bucket_url()),
    Case("bucket-row", _bucket_url("row/")),
    Case("bucket-recount", _bucket_url("recount/"), ("post",)),
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
    Case("dashboard", lambda c: "/p/alpha/dashboard/"),
    Case("dashboard-csv", lambda c: "/p/alpha/dashboard/waiting.csv"),
    Case("dashboard-idle", lambda c: "/p/alpha/dashboard/idle/"),
    Case("dashboard-idle-csv", lambda c: "/p/alpha/dashboard/idle/people.csv"),
    Case("billing-usage", lambda c: _usage_url(c) and "/p/alpha/usage/"),
    Case("billing-budget", lambda c: "/p/alpha/usage/budget/", ("post",)),
    Case("api-usage", _usage_url, ("get",), api=True),
    Case("sweep-list", lambda c: _sweep(c) and "/p/alpha/sweeps/"),
    Case("sweep-new", lambda c: "/p/alpha/sweeps/new/", ("get", "post")),
    Case("sweep-detail", lambda c: f"/p/alpha/sweeps/{_sweep(c)}/"),
    Case("sweep-stop", lambda c: f"/p/alpha/sweeps/{_sweep(c)}/stop/", ("post",)),
    Case("compare", lambda c: f"/p/alpha/compare/?sweep={_sweep(c)}"),
    Case("compare-csv", lambda c: f"/p/alpha/compare.csv?sweep={_sweep(c)}"),
    Case("adapter-list", lambda c: _sweep(c) and "/p/alpha/adapters/"),
    Case(
        "api-sweep-list",
        lambda c: _sweep(c) and "/api/v1/sweeps/?project=alpha",
        ("get", "post"),
        api=True,
    ),
    Case("api-sweep-detail", lambda c: f"/api/v1/sweeps/{_sweep(c)}/?project=alpha", api=True),
    Case(
        "api-sweep-stop",
        lambda c: f"/api/v1/sweeps/{_sweep(c)}/stop/?project=alpha",
        ("post",),
        api=True,
    ),
    Case("api-adapter-list", lambda c: _sweep(c) and "/api/v1/adapters/?project=alpha", api=True),
    Case(
        "api-adapter-detail", lambda c: f"/api/v1/adapters/{_adapter(c)}/?project=alpha", api=True
    ),
]

# Routes that hold no project data: public, or the user's own things (tested in test_accounts).
PUBLIC = {
    "home",
    "healthz",
    "readyz",
    "login",
    "logout",
    "api-schema",
    "api-docs",
    "api-root",
    "api-not-found",  # any unrouted path under /api/: a JSON 404 (test_api_errors)
    # Open through a one-time ticket to a notebook's or app's own host: the kind's own rule
    # decides, unknown and others' alike 404 (usercontent/test_local_proxy.py, test_gateway.py)
    "usercontent-open",
    # single sign-on, and links whose token is the credential (tests/controlpanel/people)
    "oidc-login",
    "oidc-callback",
    "password-set",
    "password-set-done",
    "invitation-accept",
}
PERSONAL = {
    "password_change",
    "password_change_done",
    "user-settings",
    "token-revoke",
    # confirming an SSO identity waiting in one's own session (people/test_sso_linking.py)
    "sso-connect",
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
    # every project's dashboard: site admins only (others 404; tests/controlpanel/dashboards)
    "dashboard-all",
    "dashboard-all-csv",
    "dashboard-all-idle",  # and its idle money (others 404; reclaim/test_idle_money.py)
    "dashboard-all-idle-csv",
    # the capacity view: site admins only (others 404; dashboards/test_capacity.py), and its
    # API: others 403, anonymous 401 (dashboards/test_capacity_api.py)
    "dashboard-capacity",
    "api-capacity",
    # Prometheus: the METRICS_TOKEN bearer or a site admin's session (test_metrics.py)
    "metrics",
    # accounts: site admins only (others 404; tests/controlpanel/people/test_people.py)
    "people",
    "person-create",
    "person-detail",
    "person-workload",
    # billing: site admins only (others 404; tests/controlpanel/billing/test_admin_pages.py)
    "billing",
    "billing-csv",
    "billing-prices",
    "billing-prices-csv",
    "billing-period",
    "billing-project",
    "billing-project-csv",
    "billing-run",
    "billing-run-csv",
    "billing-invoice",
    "billing-invoice-csv",
    # the audit log: site admins only (others 404; tests/controlpanel/audit/test_audit.py)
    "audit",
    "audit-csv",
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


@dataclass(frozen=True)
class Probe:
    """What the project's manager sends to a route, and what proves the answer is the real one:
    the status and a piece of the body (or of the redirect's target) naming that object."""

    method: str
    status: int
    shows: str
    data: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | None = None


def _upload(ctx: dict[str, Any], *, with_part: bool = False) -> dict[str, Any]:
    """A multipart upload started in the owner's bucket (one 5-byte part uploaded if asked)."""
    s3: DatastoreConfig = ctx["s3"]
    upload_id = create_multipart_upload(s3, bucket=ctx["bucket"], key="big.bin")
    data: dict[str, Any] = {"key": "big.bin", "upload_id": upload_id}
    if with_part:
        (part,) = presign_upload_parts(
            s3, bucket=ctx["bucket"], key="big.bin", upload_id=upload_id, part_numbers=[1]
        )
        etag = httpx.put(part.url, content=b"hello").raise_for_status().headers["ETag"]
        data["parts"] = [{"part_number": 1, "etag": etag}]
    return data


def _shared_with_member(ctx: dict[str, Any]) -> dict[str, Any]:
    """The owner's API notebook shared with `member` (by its owner), and the body that takes
    that share back."""
    from controlpanel.notebooks import sharing
    from controlpanel.projects.access import project_access

    access = project_access(user=ctx["owner"], slug="alpha")
    notebook = _api_notebook(ctx)
    sharing.notebook_share_member(
        access=access, user=ctx["owner"], notebook=notebook, member="member"
    )
    return {"member": "member"}


def _job_spec(ctx: dict[str, Any]) -> dict[str, Any]:
    """The fine-tune preset: the local backend (the default here) refuses anything else."""
    bucket = _bucket(ctx).split("/")[1]
    return {
        "preset": "finetune",
        "flavor": "ai1-1-cpu",
        "volumes": [
            f"{bucket}@LOCAL/chat:/workspace/data",
            f"{bucket}@LOCAL/runs:/workspace/output:rw",
        ],
        "params": {"base_model": "org/tiny"},
    }


OWNER: dict[str, tuple[Probe, ...]] = {
    "project-home": (Probe("get", 200, "<title>Alpha \u00b7"),),
    "project-settings": (
        Probe("get", 200, "<title>Settings \u00b7 Alpha"),
        Probe("post", 302, "/p/alpha/settings/", {"notebook_idle_minutes": "30"}),
    ),
    "first-run-dismiss": (Probe("post", 302, "/p/alpha/"),),
    "project-secrets": (
        Probe("post", 302, "/p/alpha/#secrets", {"action": "set", "name": "B", "value": "v"}),
    ),
    "api-secret-list": (
        Probe("get", 200, '"name":"ALPHA_TOKEN"'),
        Probe("post", 201, '"name":"NEW_TOKEN"', {"name": "NEW_TOKEN", "value": "v"}),
    ),
    "api-secret-detail": (Probe("delete", 204, ""),),
    "api-app-token-list": (
        Probe("get", 200, '"name":"ci"'),
        Probe("post", 201, '"token":"aja_', {"name": "bot"}),
    ),
    "api-app-token-detail": (Probe("delete", 204, ""),),
    "member-list": (
        Probe("get", 200, "<td>member</td>"),
        Probe("post", 302, "/p/alpha/members/", {"username": "outsider", "role": "member"}),
    ),
    "member-update": (Probe("post", 302, "/p/alpha/members/", {"role": "manager"}),),
    "member-invite": (
        Probe("post", 302, "/p/alpha/members/", {"email": "new@example.com", "role": "member"}),
    ),
    "invitation-revoke": (Probe("post", 302, "/p/alpha/members/"),),
    "api-project-detail": (
        Probe("get", 200, '"slug":"alpha"'),
        Probe("patch", 200, '"notebook_idle_minutes":30', {"notebook_idle_minutes": 30}),
    ),
    "api-member-list": (
        Probe("get", 200, '"username":"member"'),
        Probe("post", 201, '"username":"outsider"', {"username": "outsider", "role": "member"}),
    ),
    "api-member-detail": (
        Probe("patch", 200, '"username":"member","role":"manager"', {"role": "manager"}),
        Probe("delete", 204, ""),
    ),
    "job-list": (Probe("get", 200, "secret-job"),),
    "dashboard": (Probe("get", 200, "<title>Dashboard \u00b7 Alpha"),),
    "dashboard-csv": (Probe("get", 200, "secret-job"),),
    "dashboard-idle": (Probe("get", 200, "<title>Idle GPUs \u00b7 Alpha"),),
    "dashboard-idle-csv": (Probe("get", 200, 'filename="alpha-idle-people-'),),
    "billing-usage": (Probe("get", 200, "secret-job"),),
    "billing-budget": (Probe("post", 302, "/p/alpha/usage/", {"monthly_budget": "12.50"}),),
    "api-usage": (Probe("get", 200, '"workload_name":"secret-job"'),),
    "job-new": (
        Probe("get", 200, "New job \u00b7 Alpha"),
        Probe("post", 400, "New job \u00b7 Alpha", {}),  # the form's errors, on this project
    ),
    "job-detail": (Probe("get", 200, "<title>secret-job"),),
    "job-status": (Probe("get", 200, "secret-job"),),
    "job-logs": (Probe("get", 200, "<title>Log \u00b7 secret-job"),),
    "job-log-download": (Probe("get", 200, 'filename="job-{job:.8}-run1.log"'),),
    "job-action": (Probe("post", 302, "/p/alpha/jobs/{job}/"),),
    "notebook-list": (Probe("get", 200, "secret-notebook"),),
    "notebook-new": (
        Probe("get", 200, "New notebook \u00b7 Alpha"),
        Probe("post", 400, "New notebook \u00b7 Alpha", {}),
    ),
    "notebook-detail": (Probe("get", 200, "<title>secret-notebook"),),
    "notebook-status": (Probe("get", 200, "secret-notebook"),),
    "notebook-logs": (Probe("get", 200, "<title>Log \u00b7 secret-notebook"),),
    "notebook-log-download": (Probe("get", 200, 'filename="notebook-{notebook:.8}-run1.log"'),),
    "notebook-open": (Probe("get", 409, "secret-notebook is STARTING"),),  # not running yet
    "notebook-action": (Probe("post", 302, "/p/alpha/notebooks/{notebook}/"),),
    "app-list": (Probe("get", 200, "secret-app"),),
    "app-new": (
        Probe("get", 200, "New app \u00b7 Alpha"),
        Probe("post", 400, "New app \u00b7 Alpha", {}),
    ),
    "app-detail": (Probe("get", 200, "<title>secret-app"),),
    "app-status": (Probe("get", 200, "secret-app"),),
    "app-logs": (Probe("get", 200, "<title>Log \u00b7 secret-app"),),
    "app-log-download": (Probe("get", 200, 'filename="app-'),),
    "app-try": (Probe("post", 409, "The app is QUEUED: start it", {"message": "Hi"}),),
    "app-action": (Probe("post", 302, "/p/alpha/apps/"),),
    "api-app-list": (
        Probe("get", 200, '"name":"secret-app"'),
        Probe(
            "post",
            201,
            '"project":"alpha"',
            {"flavor": "ai1-1-cpu", "model": "alpha-data@LOCAL/tiny-llama"},
        ),
    ),
    "api-app-detail": (Probe("get", 200, '"name":"secret-app"'), Probe("delete", 204, "")),
    "api-app-start": (Probe("post", 400, "The app is QUEUED: stop it first."),),
    "api-app-stop": (Probe("post", 200, '"state":"STOPPED"'),),  # never launched
    "api-app-logs": (Probe("get", 200, '"state":"QUEUED"'),),
    "api-job-list": (
        Probe("get", 200, '"name":"secret-job"'),
        Probe("post", 201, '"project":"alpha"', _job_spec),
    ),
    "api-job-detail": (
        Probe("get", 200, '"name":"secret-job"'),
        Probe("delete", 400, "Stop the job before deleting it."),
    ),
    "api-job-stop": (Probe("post", 200, '"state":"INTERRUPTED"'),),
    "api-job-rerun": (Probe("post", 400, "Only a finished job can be run again"),),
    "api-job-retry-push": (Probe("post", 400, "(SYNC_FAILED) can retry it"),),
    "api-job-logs": (Probe("get", 200, '"state":"QUEUED"'),),
    "api-notebook-list": (
        Probe("get", 200, '"name":"api-notebook"'),
        Probe("post", 201, '"project":"alpha"', {"flavor": "ai1-1-cpu", "name": "nb2"}),
    ),
    "api-notebook-detail": (
        Probe("get", 200, '"name":"api-notebook"'),
        Probe("delete", 204, ""),
    ),
    "api-notebook-start": (Probe("post", 400, "The notebook is RUNNING: stop it first."),),
    "api-notebook-stop": (Probe("post", 200, '"state":"STOPPED"'),),  # never launched
    "api-notebook-keep-alive": (Probe("post", 200, '"name":"api-notebook"'),),
    "api-notebook-logs": (Probe("get", 200, '"state":"RUNNING"'),),
    "api-notebook-shares": (Probe("get", 200, '"project":false,"members":[]'),),
    "api-notebook-share": (
        Probe("post", 200, '"project":false,"members":["member"]', {"member": "member"}),
    ),
    "api-notebook-unshare": (
        Probe("post", 200, '"project":false,"members":[]', _shared_with_member),
    ),
    "bucket-list": (
        Probe("get", 200, "alpha-data"),
        Probe("post", 400, "Object Storage \u00b7 Alpha", {}),
    ),
    "bucket-browse": (Probe("get", 200, "a.txt"),),
    "bucket-row": (Probe("get", 200, 'data-bucket="alpha-data"'),),
    "bucket-recount": (Probe("post", 302, "/p/alpha/buckets/"),),
    "bucket-delete": (
        Probe("get", 200, "<title>Delete alpha-data"),
        Probe("post", 302, "/p/alpha/buckets/", {"confirm": "alpha-data", "empty": "on"}),
    ),
    "object-download": (Probe("get", 302, "/alpha-data/a.txt?"),),
    "object-delete": (Probe("post", 302, "/p/alpha/buckets/LOCAL/alpha-data/", {"keys": "a.txt"}),),
    "api-bucket-list": (
        Probe("get", 200, '"name":"alpha-data"'),
        Probe("post", 400, '"name":', {}),
    ),
    "api-bucket-attach": (Probe("post", 400, '"name":', {}),),
    "api-bucket-detail": (
        Probe("get", 200, '"name":"alpha-data"'),
        Probe("delete", 409, "alpha-data"),  # it holds a.txt
    ),
    "api-object-list": (Probe("get", 200, '"key":"a.txt"'),),
    "api-object-delete": (Probe("post", 200, '"deleted":["a.txt"]', {"keys": ["a.txt"]}),),
    "api-download-url": (Probe("get", 200, "/alpha-data/a.txt?"),),
    "api-upload-url": (Probe("post", 200, "/alpha-data/b.txt?", {"key": "b.txt"}),),
    "api-upload-done": (Probe("post", 204, "", {"key": "b.txt"}),),
    "api-upload-start": (Probe("post", 201, '"upload_id":', {"key": "c.bin", "size": 10}),),
    "api-upload-parts": (
        Probe("post", 200, "partNumber=1", lambda c: _upload(c) | {"part_numbers": [1]}),
    ),
    "api-upload-complete": (
        Probe("post", 200, '"key":"big.bin"', lambda c: _upload(c, with_part=True)),
    ),
    "api-upload-abort": (Probe("post", 204, "", _upload),),
    "sweep-list": (Probe("get", 200, "secret-sweep"),),
    "sweep-new": (
        Probe("get", 200, "New sweep \u00b7 Alpha"),
        Probe("post", 400, "New sweep \u00b7 Alpha", {}),
    ),
    "sweep-detail": (Probe("get", 200, "<title>secret-sweep"),),
    "sweep-stop": (Probe("post", 302, "/p/alpha/sweeps/"),),
    "compare": (Probe("get", 200, "Compare: secret-sweep"),),
    "compare-csv": (Probe("get", 200, 'filename="compare.csv"'),),
    "adapter-list": (Probe("get", 200, "secret-adapter"),),
    "api-sweep-list": (
        Probe("get", 200, '"name":"secret-sweep"'),
        Probe("post", 400, '"space":', {"name": "s2"}),
    ),
    "api-sweep-detail": (Probe("get", 200, '"name":"secret-sweep"'),),
    "api-sweep-stop": (Probe("post", 200, '"state":"STOPPED"'),),
    "api-adapter-list": (Probe("get", 200, '"name":"secret-adapter"'),),
    "api-adapter-detail": (Probe("get", 200, '"name":"secret-adapter"'),),
}


def test_every_case_has_an_owner_probe_for_each_method() -> None:
    assert {c.name: c.methods for c in CASES} == {
        name: tuple(p.method for p in probes) for name, probes in OWNER.items()
    }


@pytest.fixture
def owner_s3(panel_s3: DatastoreConfig) -> Iterator[DatastoreConfig]:
    """The owner's bucket `alpha-data` on the test S3 server, holding `a.txt` and a dataset."""
    with contextlib.suppress(BucketNotFound):
        delete_bucket(panel_s3, bucket="alpha-data", force=True)
    create_bucket(panel_s3, bucket="alpha-data")
    put_object(panel_s3, bucket="alpha-data", key="a.txt", data=b"owner's data")
    put_dataset(panel_s3, "alpha-data")  # the fine-tune probe's dataset (chat/train.jsonl)
    put_weights(panel_s3, "alpha-data")  # the app probe's model folder (tiny-llama/)
    yield panel_s3
    with contextlib.suppress(BucketNotFound):
        delete_bucket(panel_s3, bucket="alpha-data", force=True)


@pytest.fixture
def no_cluster_identity(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The web pods on a cluster: no token, so building a compute backend would fail there.
    Here it fails the test: every answer must come from rows (and enqueued tasks)."""
    from controlpanel.engine import backend

    def refuse() -> Any:
        raise AssertionError("the web process built a compute backend")

    settings.COMPUTE_BACKEND = "kubernetes"
    backend.set_backend(None)
    monkeypatch.setattr(backend, "_build_backend", refuse)
    yield
    backend.set_backend(None)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_owner_gets_the_real_answer(
    case: Case,
    ctx: dict[str, Any],
    owner_client: Client,
    owner_api: APIClient,
    owner_s3: DatastoreConfig,
    no_cluster_identity: None,
) -> None:
    """The positive control of the tests above: the same route, the project's manager, on a
    web process that has no cluster identity (so no route may reach the cluster)."""
    ctx = ctx | {"s3": owner_s3, "bucket": "alpha-data"}
    job, notebook, _, _ = _job(ctx), _notebook(ctx), _bucket(ctx), _secret(ctx)
    url = case.path(ctx)
    client = owner_api if case.api else owner_client
    for probe in OWNER[case.name]:
        data = probe.data(ctx) if callable(probe.data) else probe.data
        response = getattr(client, probe.method)(
            url, data or {}, **({"format": "json"} if case.api else {})
        )
        seen = _answer(response)
        assert response.status_code == probe.status, (probe.method, url, seen[:2000])
        shows = probe.shows.format(job=job, notebook=notebook)
        assert shows in seen, (probe.method, url, seen[:2000])
        assert "alpha-secret-value" not in seen, (probe.method, url)  # never, on any route


def _answer(response: Any) -> str:
    """The body, with the redirect target and the download's file name in front."""
    body = b"".join(response.streaming_content) if response.streaming else response.content
    head = f"{response.get('Location', '')} {response.get('Content-Disposition', '')} "
    return head + body.decode(errors="replace")


# Routes about the project itself, not about one of its things (jobs, buckets, members).
PROJECT_LEVEL = {"project-home", "member-list", "api-project-detail", "api-member-list"}
PROJECT_LEVEL |= {"project-settings", "first-run-dismiss"}
PROJECT_LEVEL |= {"member-invite"}
PROJECT_LEVEL |= {"project-secrets", "api-secret-list", "api-app-token-list"}
PROJECT_LEVEL |= {"job-list", "job-new", "api-job-list", "bucket-list", "api-bucket-list"}
PROJECT_LEVEL |= {"api-notebook-list"}
PROJECT_LEVEL |= {"notebook-list", "notebook-new"}
PROJECT_LEVEL |= {"app-list", "api-app-list"}
PROJECT_LEVEL |= {"dashboard", "dashboard-csv", "dashboard-idle", "dashboard-idle-csv"}
PROJECT_LEVEL |= {"billing-usage", "billing-budget", "api-usage"}
PROJECT_LEVEL |= {"sweep-list", "sweep-new", "api-sweep-list", "adapter-list", "api-adapter-list"}
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


def test_another_projects_member_changes_no_share(
    ctx: dict[str, Any], outsider_api: APIClient
) -> None:
    """The share routes with the very bodies the owner's would succeed with, sent by a member
    of another project under either project: 404 each time, the notebook's shares and the
    audit log as they were."""
    from controlpanel.audit.models import AuditEvent

    def tries(route: str, data: dict[str, Any]) -> None:
        notebook = _api_notebook(ctx)
        before = (notebook.params, AuditEvent.objects.count())
        url = _api_notebook_url(route)(ctx)
        for where in (url, url.replace("project=alpha", "project=beta")):
            response = outsider_api.post(where, data, format="json")
            assert response.status_code == 404, (where, data, response.status_code)
        notebook.refresh_from_db()
        assert (notebook.params, AuditEvent.objects.count()) == before, (route, data)

    from controlpanel.notebooks import sharing
    from controlpanel.projects.access import project_access

    tries("share/", {"member": "member"})
    tries("share/", {"project": True})
    _shared_with_member(ctx)
    access = project_access(user=ctx["owner"], slug="alpha")
    sharing.notebook_share(access=access, user=ctx["owner"], notebook=_api_notebook(ctx))
    tries("unshare/", {"member": "member"})
    tries("unshare/", {"project": True})
    assert sharing.notebook_shares(_api_notebook(ctx)) == {"project": True, "members": ["member"]}
