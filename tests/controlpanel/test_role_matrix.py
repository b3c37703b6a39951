"""The role matrix over every project route of test_isolation.CASES: beside the owner (a
manager), another project's member and an anonymous user covered there, the same requests from
- a member of the project without the manager role: the manager's real answer, or, for the
  routes declared in MANAGER_ONLY or OWNER_ONLY, a refusal that names nothing of the object;
- a site admin who is no member: the manager's real answer (admins see and act on every
  project), but for OWNER_ONLY (what only the object's owner may do): 403;
- the Bearer token of the project's manager sent to a web page (not an API route): not a
  credential there (the log-in page), so a leaked token never opens the browser's pages;
- the session of the project's manager on an API route, without the CSRF token, for the
  routes that change something: refused (403), so a page elsewhere cannot drive the API
  through the browser's cookie.
A route added to CASES is in this matrix at once; a manager-only one fails here until it is
declared in MANAGER_ONLY."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from storage.datastore import DatastoreConfig
from tests.controlpanel import test_isolation as iso
from tests.controlpanel.test_isolation import (
    CASES,
    OWNER,
    Case,
    _answer,
    _bucket,
    _job,
    _notebook,
    _secret,
)
from tests.fixtures.panel import api_client_for, logged_in

# The fixtures of test_isolation (pytest registers them by their own names).
ctx, owner_s3, no_cluster_identity = iso.ctx, iso.owner_s3, iso.no_cluster_identity

# What a plain member may not do, by route and method: the project's own settings and people,
# its usage and money, and acting on a colleague's work (its owner and the managers may). The
# API answers 403; a page answers 403, or sends back to the object with the reason flashed.
MANAGER_ONLY: set[tuple[str, str]] = {
    ("project-settings", "get"),
    ("project-settings", "post"),
    ("api-project-detail", "patch"),
    ("project-secrets", "post"),
    ("api-secret-list", "post"),
    ("api-secret-detail", "delete"),
    ("api-app-token-list", "get"),
    ("api-app-token-list", "post"),
    ("api-app-token-detail", "delete"),
    ("member-list", "post"),
    ("member-update", "post"),
    ("member-invite", "post"),
    ("invitation-revoke", "post"),
    ("api-member-list", "post"),
    ("api-member-detail", "patch"),
    ("api-member-detail", "delete"),
    ("dashboard", "get"),
    ("dashboard-csv", "get"),
    ("dashboard-idle", "get"),
    ("dashboard-idle-csv", "get"),
    ("billing-usage", "get"),
    ("billing-budget", "post"),
    ("api-usage", "get"),
    ("job-action", "post"),
    ("sweep-stop", "post"),
    ("api-sweep-stop", "post"),
    ("notebook-action", "post"),
    ("app-action", "post"),
    ("api-job-detail", "delete"),
    ("api-job-stop", "post"),
    ("api-job-rerun", "post"),
    ("api-job-retry-push", "post"),
    ("api-notebook-detail", "delete"),
    ("api-notebook-start", "post"),
    ("api-notebook-stop", "post"),
    ("api-notebook-keep-alive", "post"),
    ("api-app-detail", "delete"),
    ("api-app-start", "post"),
    ("api-app-stop", "post"),
    ("api-notebook-unshare", "post"),  # the notebook's owner or a manager
}
# What only the object's own owner may do, not even a site admin (nor another manager): sharing
# a notebook, whose editor is a shell with its owner's volumes and secrets (notebooks/sharing).
OWNER_ONLY: set[tuple[str, str]] = {("api-notebook-share", "post")}
# What the site admin's page shows in place of the owner's (a link to the person's page).
ADMIN_SHOWS = {("member-list", "get"): ">member</a>"}


def _prepare(ctx: dict[str, Any], s3: DatastoreConfig) -> tuple[dict[str, Any], str, str]:
    ctx = ctx | {"s3": s3, "bucket": "alpha-data"}
    job, notebook, _, _ = _job(ctx), _notebook(ctx), _bucket(ctx), _secret(ctx)
    return ctx, job, notebook


def _send(client: Any, case: Case, method: str, url: str, data: Any) -> Any:
    return getattr(client, method)(url, data or {}, **({"format": "json"} if case.api else {}))


def _real_answers(
    case: Case,
    ctx: dict[str, Any],
    client: Any,
    ids: tuple[str, str],
    *,
    skip: frozenset[str] = frozenset(),
    shows_instead: dict[tuple[str, str], str] | None = None,
) -> list[str]:
    """Send the owner's probes (but those in `skip`) with `client`; the differences from the
    owner's answers."""
    wrong = []
    url = case.path(ctx)
    for probe in OWNER[case.name]:
        if probe.method in skip:
            continue
        data = probe.data(ctx) if callable(probe.data) else probe.data
        response = _send(client, case, probe.method, url, data)
        seen = _answer(response)
        shows = (shows_instead or {}).get((case.name, probe.method), probe.shows)
        shows = shows.format(job=ids[0], notebook=ids[1])
        if response.status_code != probe.status or shows not in seen:
            wrong.append(f"{probe.method} {url}: {response.status_code} {seen[:300]!r}")
    return wrong


def _refused(response: Any) -> bool:
    """403, or (a page) a redirect back with the reason flashed and nothing done."""
    if response.status_code == 403:
        return True
    if response.status_code != 302:
        return False
    from django.contrib.messages import get_messages

    said = " ".join(str(m) for m in get_messages(response.wsgi_request))
    return "Only the" in said and "manager" in said


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_member_without_the_manager_role(
    case: Case, ctx: dict[str, Any], owner_s3: DatastoreConfig, no_cluster_identity: None
) -> None:
    ctx, job, nb = _prepare(ctx, owner_s3)
    client = api_client_for(ctx["member"]) if case.api else logged_in(ctx["member"])
    refused = frozenset(m for m in case.methods if (case.name, m) in MANAGER_ONLY | OWNER_ONLY)
    url = case.path(ctx)
    for probe in OWNER[case.name]:
        if probe.method not in refused:
            continue
        data = probe.data(ctx) if callable(probe.data) else probe.data
        response = _send(client, case, probe.method, url, data)
        assert _refused(response), (probe.method, url, response.status_code)
        seen = _answer(response)
        assert "alpha-secret-value" not in seen and "ALPHA_TOKEN" not in seen, (url, seen[:300])
    # The rest, after the refusals (which changed nothing): the manager's very answers.
    assert _real_answers(case, ctx, client, (job, nb), skip=refused) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_site_admin_who_is_no_member(
    case: Case,
    ctx: dict[str, Any],
    admin_user: Any,
    owner_s3: DatastoreConfig,
    no_cluster_identity: None,
) -> None:
    ctx, job, nb = _prepare(ctx, owner_s3)
    client = api_client_for(admin_user) if case.api else logged_in(admin_user)
    refused = frozenset(m for m in case.methods if (case.name, m) in OWNER_ONLY)
    url = case.path(ctx)
    for probe in OWNER[case.name]:
        if probe.method in refused:
            data = probe.data(ctx) if callable(probe.data) else probe.data
            response = _send(client, case, probe.method, url, data)
            assert response.status_code == 403, (probe.method, url, response.status_code)
    assert (
        _real_answers(case, ctx, client, (job, nb), skip=refused, shows_instead=ADMIN_SHOWS) == []
    )


def test_manager_only_names_real_routes() -> None:
    methods = {(c.name, m) for c in CASES for m in c.methods}
    assert MANAGER_ONLY - methods == set()
    assert OWNER_ONLY - methods == set()


WEB = [c for c in CASES if not c.api]
API_WRITES = [c for c in CASES if c.api and set(c.methods) - {"get"}]


@pytest.mark.parametrize("case", WEB, ids=lambda c: c.name)
def test_a_bearer_token_is_no_credential_on_a_page(case: Case, ctx: dict[str, Any]) -> None:
    _, raw = _token(ctx["owner"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    url = case.path(ctx)
    for method in case.methods:
        response = getattr(client, method)(url, {})
        assert response.status_code == 302, (method, url, response.status_code)
        assert response["Location"].startswith("/login/"), (method, url)


@pytest.mark.parametrize("case", API_WRITES, ids=lambda c: c.name)
def test_the_api_takes_no_session_without_its_csrf_token(
    case: Case, ctx: dict[str, Any], owner_s3: DatastoreConfig
) -> None:
    ctx, _, _ = _prepare(ctx, owner_s3)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(ctx["owner"])
    url = case.path(ctx)
    for method in set(case.methods) - {"get"}:
        response = getattr(client, method)(url, {}, format="json")
        assert response.status_code in (401, 403), (method, url, response.status_code)


def _token(user: Any) -> tuple[Any, str]:
    from controlpanel.accounts.services import token_create

    return token_create(user=user, name="matrix")
