"""Every error page a browser is shown is the styled one (#32): what happened in a sentence,
where to go, the shell around it; the API, htmx swaps and scripts keep their own answers."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.projects.models import Project
from tests.fixtures.panel import logged_in

PAGE = {"HTTP_ACCEPT": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def _styled(response: Any, status: int) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert f'data-testid="error-{status}"' in html and 'rel="stylesheet"' in html
    return html


@pytest.mark.django_db
def test_a_members_dashboards_link_is_a_styled_403(member: Any, project: Project) -> None:
    client = logged_in(member)
    html = _styled(client.get("/p/alpha/dashboard/", **PAGE), 403)
    assert 'class="topbar"' in html  # the shell: the project's sections stay at hand
    assert "Only the project&#x27;s managers can do this." in html
    assert 'href="/p/alpha/"' in html and 'href="/p/alpha/members/"' in html
    # the same without an Accept header (a raised PermissionDenied is always the page)
    _styled(client.get("/p/alpha/dashboard/"), 403)


@pytest.mark.django_db
def test_a_bad_billing_month_is_a_styled_400(admin_user: Any) -> None:
    client = logged_in(admin_user)
    html = _styled(client.get("/billing/?month=2025-13", **PAGE), 400)
    assert "month:" in html and "Nothing was changed" in html
    # a script asking the same keeps the plain-text answer
    script = client.get("/billing/?month=2025-13", HTTP_ACCEPT="*/*")
    assert script.status_code == 400
    assert script["Content-Type"].startswith("text/plain")


@pytest.mark.django_db
def test_a_get_on_the_secrets_url_is_a_styled_405(owner: Any, project: Project) -> None:
    response = logged_in(owner).get("/p/alpha/secrets/", **PAGE)
    html = _styled(response, 405)
    assert response["Allow"] == "POST"
    assert "This address does not answer a GET" in html and "It only takes POST." in html
    assert 'href="/p/alpha/"' in html


@pytest.mark.django_db
def test_hostile_text_in_an_error_is_escaped(admin_user: Any) -> None:
    payload = "<script>alert(1)</script>"
    response = logged_in(admin_user).get("/billing/", {"month": payload}, **PAGE)
    html = _styled(response, 400)
    assert payload not in html and "&lt;script&gt;" in html


@pytest.mark.django_db
def test_machines_and_htmx_keep_their_answers(owner: Any, project: Project) -> None:
    client = logged_in(owner)
    assert client.get("/p/alpha/secrets/", HTTP_ACCEPT="*/*").content == b""
    swap = client.get("/p/alpha/secrets/", HTTP_HX_REQUEST="true", **PAGE)
    assert (swap.status_code, swap.content) == (405, b"")
    api = client.get("/api/v1/projects/alpha/no-such-thing/", **PAGE)
    assert api["Content-Type"].startswith("application/json")


def test_a_visitor_is_offered_the_log_in(client: Client, db: Any) -> None:
    response = client.post("/metrics", **PAGE)  # a machine path: untouched
    assert response.status_code == 404 and "error-" not in response.content.decode()
    html = _styled(client.get("/login/", {"next": "x"}, REQUEST_METHOD="DELETE", **PAGE), 405)
    assert 'href="/login/"' in html
