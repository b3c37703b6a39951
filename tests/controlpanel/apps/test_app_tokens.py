"""App-only tokens (issue 25): a manager makes one through the API (shown once), the app's own
host and the gateway's question accept it for that project's apps only, the API refuses it
everywhere, a revoke shuts it out; a plain member can neither make nor list them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from controlpanel.accounts.models import AppToken
from controlpanel.accounts.services import token_authenticate
from controlpanel.projects.models import Project
from controlpanel.served.app_tokens import MANAGERS_ONLY
from controlpanel.served.auth import app_caller
from tests.controlpanel.apps.test_app_access import INTERNAL, host, make_app
from tests.fixtures.panel import api_client_for

TOKENS = "/api/v1/projects/{slug}/app-tokens/"


def make_token(user: Any, slug: str = "alpha", name: str = "ci") -> dict[str, Any]:
    answer = api_client_for(user).post(TOKENS.format(slug=slug), {"name": name}, format="json")
    assert answer.status_code == 201, answer.content
    body: dict[str, Any] = answer.json()
    return body


@pytest.mark.django_db
def test_an_app_token_calls_its_projects_apps_and_nothing_else(
    project: Project, other_project: Project, owner: Any, outsider: Any
) -> None:
    app = make_app(project, owner)
    elsewhere = make_app(other_project, outsider)
    made = make_token(owner)
    raw = made["token"]
    assert raw.startswith("aja_") and made["hint"] == raw[:10]
    bearer = f"Bearer {raw}"
    client = Client()

    def call(target: Any) -> Any:
        return client.get("/v1/models", HTTP_HOST=host(target), HTTP_AUTHORIZATION=bearer)

    def ask(target: Any) -> int:
        return client.get(
            "/_ajuste/auth",
            HTTP_HOST=INTERNAL,
            HTTP_AUTHORIZATION=bearer,
            HTTP_X_AJUSTE_HOST=host(target),
            HTTP_X_ORIGINAL_URI="/v1/models",
        ).status_code

    assert call(app).status_code == 502  # let through to the (absent) server
    assert ask(app) == 200
    refused = call(elsewhere)
    assert refused.status_code == 403 and refused.json()["error"]["message"] == "No such app."
    assert ask(elsewhere) == 403
    # The API takes no app-only token, not even to read the project's own apps.
    for path in ("/api/v1/projects/", "/api/v1/apps/?project=alpha", TOKENS.format(slug="alpha")):
        assert client.get(path, HTTP_AUTHORIZATION=bearer).status_code == 401, path
    # Revoked: the app refuses it from the next call on.
    listing = api_client_for(owner).get(TOKENS.format(slug="alpha")).json()
    assert [row["name"] for row in listing] == ["ci"] and "token" not in listing[0]
    gone = api_client_for(owner).delete(TOKENS.format(slug="alpha") + f"{made['id']}/")
    assert gone.status_code == 204
    assert call(app).status_code == 401 and ask(app) == 401
    revoked = api_client_for(owner).get(TOKENS.format(slug="alpha")).json()
    assert revoked[0]["revoked_at"] is not None


@pytest.mark.django_db
def test_only_managers_make_list_and_revoke_app_tokens(
    project: Project, other_project: Project, owner: Any, member: Any, outsider: Any
) -> None:
    url = TOKENS.format(slug="alpha")
    plain = api_client_for(member)
    made = plain.post(url, {"name": "mine"}, format="json")
    assert made.status_code == 403 and MANAGERS_ONLY in made.content.decode()
    assert plain.get(url).status_code == 403
    assert not AppToken.objects.exists()
    blank = api_client_for(owner).post(url, {"name": "  "}, format="json")
    assert (blank.status_code, blank.json()["name"]) == (400, ["Give the token a name."])
    assert not AppToken.objects.exists()
    theirs = make_token(outsider, slug="beta")
    # Another project's token cannot be revoked from this one: 404, and it still works.
    wrong = api_client_for(owner).delete(url + f"{theirs['id']}/")
    assert wrong.status_code == 404
    assert AppToken.objects.get(pk=theirs["id"]).revoked_at is None
    assert plain.delete(url + f"{theirs['id']}/").status_code == 403


@pytest.mark.django_db
def test_the_gate_rule_alone(
    project: Project, other_project: Project, owner: Any, outsider: Any
) -> None:
    """app_caller and the API's authentication, without HTTP: an app-only token is this
    project's apps' and never a personal token."""
    raw = make_token(owner)["token"]
    assert app_caller(make_app(project, owner), f"Bearer {raw}") == (200, "")
    assert app_caller(make_app(other_project, outsider), f"Bearer {raw}") == (404, "No such app.")
    assert app_caller(make_app(project, owner), f"Bearer {raw}x") == (
        401,
        "Invalid or revoked token.",
    )
    assert token_authenticate(raw=raw) is None


@pytest.mark.django_db
def test_the_settings_page_makes_shows_once_and_revokes(
    project: Project, owner: Any, member: Any, owner_client: Client
) -> None:
    """The project's settings page, as a manager's browser uses it."""
    app = make_app(project, owner)
    page = "/p/alpha/settings/"
    made = owner_client.post(page, {"action": "app-token-create", "name": "<b>ci</b>"})
    assert made.status_code == 200 and made["Cache-Control"].startswith("max-age=0")
    html = made.content.decode()
    raw = re.search(r'id="app-token" aria-label="New app-only token"', html) and re.search(
        r'value="(aja_[^"]+)" id="app-token"', html
    )
    assert raw, "the new token is not on the page"
    token = raw.group(1)
    assert "&lt;b&gt;ci&lt;/b&gt;" in html and "<b>ci</b>" not in html  # the name escaped
    assert token not in owner_client.get(page).content.decode()  # shown once
    bearer = f"Bearer {token}"
    assert (
        Client().get("/v1/models", HTTP_HOST=host(app), HTTP_AUTHORIZATION=bearer).status_code
        == 502
    )
    blank = owner_client.post(page, {"action": "app-token-create", "name": " "})
    assert blank.status_code == 400 and "Give the token a name." in blank.content.decode()
    assert AppToken.objects.count() == 1
    colleague = Client()
    colleague.force_login(member)
    assert colleague.post(page, {"action": "app-token-create", "name": "x"}).status_code == 403
    assert colleague.post(page, {"action": "app-token-revoke", "token": "1"}).status_code == 403
    assert AppToken.objects.count() == 1 and AppToken.objects.get().revoked_at is None
    pk = AppToken.objects.get().pk
    revoked = owner_client.post(page, {"action": "app-token-revoke", "token": str(pk)})
    assert revoked.status_code == 302
    assert (
        Client().get("/v1/models", HTTP_HOST=host(app), HTTP_AUTHORIZATION=bearer).status_code
        == 401
    )
    assert ">revoked<" in owner_client.get(page).content.decode()
