"""A notebook is its owner's (issue 25): a colleague cannot open it, nor stop or delete it; a
manager can stop or delete it, not open it; the owner may share it with the project, and stop
sharing it, which closes the colleagues' editors at their next request. Asked at Open (the
panel's page and the content host's sign-in) and by the gate for every request."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.sharing import NOT_SHARED
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from controlpanel.usercontent.domain import parse_content_domain
from tests.controlpanel.usercontent.standin import StandIn
from tests.fixtures.panel import UserFactory, add_member, logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def notebook(project: Project, member: Any, standin: StandIn, settings: Any) -> Notebook:
    """A plain member's running notebook (the project's manager is the `owner` fixture)."""
    settings.USER_CONTENT_DOMAIN = parse_content_domain("localhost:8000")
    settings.COMPUTE_BACKEND = "local"
    return Notebook.objects.create(
        project=project,
        owner=member,
        name="mine",
        image="local",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=NotebookState.RUNNING,
        url=f"http://127.0.0.1:{standin.port}/?token=t",
    )


@pytest.fixture
def colleague(project: Project) -> Any:
    user = UserFactory(username="colleague")
    add_member(project, user)
    return user


def open_page(client: Client, notebook: Notebook) -> Any:
    return client.get(f"/p/alpha/notebooks/{notebook.pk}/open/")


def enter(client: Client, notebook: Notebook) -> tuple[Client, str]:
    """Open, then the ticket on the notebook's host: that host's browser side and its host."""
    ticket = open_page(client, notebook)
    assert ticket.status_code == 302, ticket.content
    url = urlsplit(ticket["Location"])
    browser = Client()
    assert browser.get(f"{url.path}?{url.query}", HTTP_HOST=url.netloc).status_code == 302
    return browser, url.netloc


def test_only_the_owner_opens_it_until_shared(
    notebook: Notebook, member: Any, owner: Any, colleague: Any
) -> None:
    enter(logged_in(member), notebook)
    detail = f"/p/alpha/notebooks/{notebook.pk}/"
    says = f"Only its owner, {member.username}, can open it; a manager can stop or delete it"
    page = logged_in(member).get(detail).content.decode()
    assert says in page and 'data-testid="share">Share with the project' in page
    page = logged_in(colleague).get(detail).content.decode()
    assert says in page and 'data-testid="share"' not in page
    for other in (colleague, owner):  # a plain member, the project's manager
        refused = open_page(logged_in(other), notebook)
        assert refused.status_code == 403 and NOT_SHARED in refused.content.decode()
        signin = logged_in(other).get(f"/usercontent/open/?host=nb-{notebook.pk.hex}")
        assert signin.status_code == 403
    # Stop and delete: the owner or a manager, never a colleague (engine/services.py).
    action = f"/p/alpha/notebooks/{notebook.pk}/"
    logged_in(colleague).post(action + "stop/")
    logged_in(colleague).post(action + "share/")
    notebook.refresh_from_db()
    assert notebook.state == NotebookState.RUNNING and not notebook.params.get("shared")
    logged_in(member).post(action + "share/")
    notebook.refresh_from_db()
    assert notebook.params["shared"] is True
    enter(logged_in(colleague), notebook)
    page = logged_in(colleague).get(detail).content.decode()
    assert "Shared with the project: its members can open it." in page
    logged_in(owner).post(action + "stop/")  # the manager stops it
    notebook.refresh_from_db()
    assert notebook.state in (NotebookState.STOPPING, NotebookState.STOPPED)


def test_unsharing_closes_a_colleagues_editor_at_the_next_request(
    notebook: Notebook, member: Any, colleague: Any, standin: StandIn, settings: Any
) -> None:
    settings.USER_CONTENT_CACHE_SECONDS = 0
    logged_in(member).post(f"/p/alpha/notebooks/{notebook.pk}/share/")
    browser, host = enter(logged_in(colleague), notebook)
    assert browser.get("/lab", HTTP_HOST=host).status_code == 200
    assert len(standin.seen) == 1
    logged_in(member).post(f"/p/alpha/notebooks/{notebook.pk}/unshare/")
    refused = browser.get("/lab", HTTP_HOST=host)
    assert refused.status_code == 403 and refused.content.decode() == NOT_SHARED + "\n"
    assert len(standin.seen) == 1  # nothing more reached the server
    owners, owner_host = enter(logged_in(member), notebook)
    assert owners.get("/lab", HTTP_HOST=owner_host).status_code == 200
