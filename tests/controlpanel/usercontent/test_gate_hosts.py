"""The gate's host check at its HTTP endpoint (`/_ajuste/auth`, as the gateway asks it): a
Host that carries a workload's label but is not exactly `<label>.<USER_CONTENT_DOMAIN>` (a
level below the domain, the domain inside another one, another domain) names no workload,
even with the owner's valid content cookie for that label. Beside hosts.parse_host's own
test in test_domain."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.accounts.models import User
from controlpanel.notebooks.models import Notebook
from controlpanel.projects.models import Project
from controlpanel.usercontent.hosts import content_host
from tests.controlpanel.jobs.test_notebook_auth import INTERNAL, cookie_for, make_notebook

pytestmark = pytest.mark.django_db
NOWHERE = "No notebook or app is served at this address."


def _ask(cookie: str, host: str, method: str = "GET", **headers: str) -> Any:
    return Client().get(
        "/_ajuste/auth",
        HTTP_HOST=INTERNAL,
        HTTP_X_AJUSTE_HOST=host,
        HTTP_X_ORIGINAL_URI="/lab",
        HTTP_X_ORIGINAL_METHOD=method,
        HTTP_COOKIE=cookie,
        **headers,
    )


def test_only_the_exact_host_under_the_domain_admits_the_owner(
    project: Project, owner: User, owner_client: Client
) -> None:
    notebook: Notebook = make_notebook(project, owner)
    cookie = cookie_for(owner_client, notebook)
    real = content_host("nb", notebook.pk).netloc
    name, _, port = real.partition(":")
    label, _, domain = name.partition(".")
    port = f":{port}" if port else ""
    assert _ask(cookie, real).status_code == 200  # the positive control

    for lookalike in (
        f"{label}.evil.{domain}{port}",
        f"{label}.{domain}.evil.example{port}",
        f"{label}.example.net{port}",
    ):
        answer = _ask(cookie, lookalike)
        assert answer.status_code == 403, lookalike
        assert answer["X-Ajuste-Reason"] == NOWHERE
        assert "X-Ajuste-Authorization" not in answer and "X-Ajuste-Upstream" not in answer


def test_the_cookie_counts_only_for_the_hosts_own_pages(
    project: Project, owner: User, owner_client: Client
) -> None:
    """A POST from another site's page (another workload's host, same site) carries the
    browser's cookie; the gate does not count it, so the owner is not recognised."""
    notebook: Notebook = make_notebook(project, owner)
    cookie = cookie_for(owner_client, notebook)
    host = content_host("nb", notebook.pk).netloc
    own = _ask(cookie, host, "POST", HTTP_SEC_FETCH_SITE="same-origin", HTTP_SEC_FETCH_MODE="cors")
    assert own.status_code == 200  # the positive control
    for headers in (
        {"HTTP_SEC_FETCH_SITE": "same-site", "HTTP_SEC_FETCH_MODE": "cors"},
        {"HTTP_ORIGIN": "http://elsewhere.example"},
    ):
        forged = _ask(cookie, host, "POST", **headers)
        assert forged.status_code in (401, 403), headers
        assert "X-Ajuste-Authorization" not in forged and "X-Ajuste-Upstream" not in forged
