"""Sharing a notebook in the API and the CLI (issue 25): `shares/`, `share/`, `unshare/` with
the page's rules. Only its owner shares, with a current member of the project (or the whole
project); the owner or a manager takes a share back; each change is audited. A member it is
shared with opens it; a hostile member cannot share it with themselves nor take shares back; a
member who left is neither listed nor let in, and cannot be shared with again."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.audit.models import AuditEvent
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.access import project_access
from controlpanel.projects.models import Membership, Project
from controlpanel.projects.services import member_remove
from controlpanel.usercontent.domain import parse_content_domain
from tests.controlpanel.test_api_schema import Schema
from tests.controlpanel.usercontent.standin import StandIn
from tests.fixtures.cli import cli_as, ok_json
from tests.fixtures.panel import UserFactory, add_member, api_client_for, logged_in

URL = "/api/v1/notebooks/"


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


@pytest.fixture
def mallory(project: Project) -> Any:
    user = UserFactory(username="mallory")
    add_member(project, user)
    return user


def opens(user: Any, notebook: Notebook) -> bool:
    """Whether Open on the panel gives `user` a ticket to the notebook's host."""
    answer = logged_in(user).get(f"/p/alpha/notebooks/{notebook.pk}/open/")
    return answer.status_code == 302


def post(user: Any, notebook: Notebook, path: str, body: dict[str, Any]) -> Any:
    client = api_client_for(user)
    return client.post(f"{URL}{notebook.pk}/{path}/?project=alpha", body, format="json")


def shares(user: Any, notebook: Notebook) -> Any:
    return api_client_for(user).get(f"{URL}{notebook.pk}/shares/?project=alpha")


@pytest.mark.django_db
def test_the_owner_shares_with_a_member_who_then_opens_it_and_it_is_audited(
    notebook: Notebook, member: Any, colleague: Any, mallory: Any
) -> None:
    assert not opens(colleague, notebook)
    answer = post(member, notebook, "share", {"member": "colleague"})
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"project": False, "members": ["colleague"]}
    assert shares(colleague, notebook).json() == {"project": False, "members": ["colleague"]}
    assert opens(colleague, notebook) and not opens(mallory, notebook)
    page = logged_in(mallory).get(f"/p/alpha/notebooks/{notebook.pk}/").content.decode()
    assert "the members it is shared with (colleague) can open it" in page
    event = AuditEvent.objects.get(action="notebook.share")
    assert event.actor == member and event.details["member"] == "colleague"
    assert event.target_id == str(notebook.pk)
    # Sharing again changes nothing and writes nothing.
    assert post(member, notebook, "share", {"member": "colleague"}).status_code == 200
    assert AuditEvent.objects.filter(action="notebook.share").count() == 1
    # The whole project, then back.
    assert post(member, notebook, "share", {"project": True}).json()["project"] is True
    assert opens(mallory, notebook)
    assert post(member, notebook, "unshare", {"project": True}).json()["project"] is False
    assert not opens(mallory, notebook) and opens(colleague, notebook)
    taken = post(member, notebook, "unshare", {"member": "colleague"})
    assert taken.json() == {"project": False, "members": []}
    assert not opens(colleague, notebook)
    assert AuditEvent.objects.filter(action="notebook.unshare").count() == 2


@pytest.mark.django_db
def test_a_hostile_member_or_a_manager_cannot_share_someone_elses_notebook(
    notebook: Notebook, member: Any, owner: Any, colleague: Any, mallory: Any
) -> None:
    post(member, notebook, "share", {"member": "colleague"})
    before = Notebook.objects.get(pk=notebook.pk).params
    refused = post(mallory, notebook, "share", {"member": "mallory"})
    assert refused.status_code == 403
    assert refused.json()["detail"] == "Only the notebook's owner can share it."
    refused = post(mallory, notebook, "share", {"project": True})
    assert refused.status_code == 403
    assert refused.json()["detail"] == "Only the notebook's owner can share it or stop sharing it."
    refused = post(mallory, notebook, "unshare", {"member": "colleague"})
    assert refused.status_code == 403 and "owner or a manager" in refused.json()["detail"]
    # A manager may stop it, not open it: sharing it with themselves would open it.
    assert post(owner, notebook, "share", {"member": "owner"}).status_code == 403
    assert Notebook.objects.get(pk=notebook.pk).params == before
    assert not opens(mallory, notebook) and not opens(owner, notebook)
    # Taking a share back is a manager's too.
    assert post(owner, notebook, "unshare", {"member": "colleague"}).json()["members"] == []
    assert AuditEvent.objects.filter(action="notebook.unshare").get().actor == owner


@pytest.mark.django_db
def test_only_a_current_member_is_shared_with_and_a_leaver_loses_the_share(
    notebook: Notebook, project: Project, member: Any, owner: Any, colleague: Any, outsider: Any
) -> None:
    for name in ("outsider", "nobody-at-all", "  "):
        refused = post(member, notebook, "share", {"member": name})
        assert refused.status_code == 400
        assert "member" in refused.json()
    assert post(member, notebook, "share", {"member": "outsider"}).json() == {
        "member": ["outsider is not a member of this project."]
    }
    assert post(member, notebook, "share", {"member": "member"}).status_code == 400  # the owner
    for body in ({}, {"member": "colleague", "project": True}):
        assert post(member, notebook, "share", body).status_code == 400
    assert shares(outsider, notebook).status_code == 404  # another project's notebook
    assert Notebook.objects.get(pk=notebook.pk).params.get("shared_with") in (None, [])

    post(member, notebook, "share", {"member": "colleague"})
    assert opens(colleague, notebook)
    membership = Membership.objects.get(project=project, user=colleague)
    member_remove(access=project_access(user=owner, slug="alpha"), membership=membership)
    assert shares(member, notebook).json()["members"] == []
    assert not opens(colleague, notebook)
    again = post(member, notebook, "share", {"member": "colleague"})
    assert again.json() == {"member": ["colleague is not a member of this project."]}
    # Rejoining later does not bring the old share back: it went with the membership.
    add_member(project, colleague)
    assert not opens(colleague, notebook)


@pytest.mark.django_db(transaction=True)
def test_the_cli_shares_lists_and_unshares_and_says_why_not(
    live_server: Any, notebook: Notebook, member: Any, mallory: Any, colleague: Any
) -> None:
    as_owner = cli_as(member, live_server.url)
    as_mallory = cli_as(mallory, live_server.url)
    ref = str(notebook.pk)[:8]
    shared = ok_json(as_owner("-o", "json", "notebook", "share", ref, "--member", "colleague"))
    assert shared == {"project": False, "members": ["colleague"]}
    listed = as_owner("notebook", "shares", ref)
    assert listed.exit_code == 0
    assert listed.output == "Not shared with the project; members it is shared with: colleague.\n"
    hostile = as_mallory("notebook", "share", ref, "--member", "mallory")
    assert hostile.exit_code == 1
    assert "HTTP 403: Only the notebook's owner can share it." in hostile.output
    stranger = as_owner("notebook", "share", ref, "--member", "outsider")
    assert stranger.exit_code == 1
    assert "--member: outsider is not a member of this project." in stranger.output
    both = as_owner("notebook", "share", ref, "--member", "colleague", "--project")
    assert both.exit_code == 2 and "Give one of --member USERNAME or --project." in both.output
    assert ok_json(as_owner("-o", "json", "notebook", "unshare", ref, "--member", "colleague")) == {
        "project": False,
        "members": [],
    }
    assert Notebook.objects.get(pk=notebook.pk).params["shared_with"] == []


@pytest.mark.django_db
def test_the_answers_match_the_openapi_description(
    notebook: Notebook, member: Any, colleague: Any
) -> None:
    client = api_client_for(member)
    document = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    schema = Schema(document.json())
    one = f"{URL}{notebook.pk}/"
    for method, path, body in (
        ("post", "share/", {"member": "colleague"}),
        ("get", "shares/", None),
        ("post", "share/", {"member": "outsider"}),
        ("post", "unshare/", {"member": "colleague"}),
    ):
        url = f"{one}{path}?project=alpha"
        schema.check(method, url, getattr(client, method)(url, body, format="json"))
    operation = schema.document["paths"][f"{URL}{{id}}/share/"]["post"]
    assert set(operation["responses"]) >= {"200", "400"}
