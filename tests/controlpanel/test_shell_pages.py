"""The shell around pages outside a project: Settings, New project and the 404 page keep the
project last opened (its switcher entry and its sections), never one the user is not in."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.projects.models import Project
from tests.fixtures.panel import add_member, logged_in


def _shell(html: str) -> str:
    """The top bar alone (the page body may name the project for its own reasons)."""
    return html.split('<header class="topbar">', 1)[1].split("</header>", 1)[0]


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/settings/", "/p/alpha/jobs/no-such-job/", "/nowhere/"])
def test_pages_outside_a_project_keep_the_current_one(owner_client: Client, path: str) -> None:
    assert owner_client.get("/p/alpha/").status_code == 200  # opens the project
    response = owner_client.get(path)
    shell = _shell(response.content.decode())
    assert "<summary>Alpha</summary>" in shell and "Choose a project" not in shell
    assert 'href="/p/alpha/jobs/"' in shell and 'href="/p/alpha/buckets/"' in shell
    assert "Choose a project first" not in shell


@pytest.mark.django_db
def test_new_project_page_keeps_the_current_project(admin_user: Any, project: Project) -> None:
    client = logged_in(admin_user)
    client.get("/p/alpha/")
    shell = _shell(client.get("/projects/new/").content.decode())
    assert "<summary>Alpha</summary>" in shell and 'href="/p/alpha/jobs/"' in shell


@pytest.mark.django_db
def test_a_project_left_since_is_not_kept(owner: Any, project: Project) -> None:
    client = logged_in(owner)
    client.get("/p/alpha/")
    project.memberships.filter(user=owner).delete()
    shell = _shell(client.get("/settings/").content.decode())
    assert "Alpha" not in shell and "Choose a project" in shell


@pytest.mark.django_db
def test_a_404_inside_a_project_has_the_navigation(owner_client: Client) -> None:
    response = owner_client.get("/p/alpha/jobs/0000/")
    assert response.status_code == 404
    html = response.content.decode()
    assert 'class="topbar"' in html and 'data-testid="not-found"' in html
    assert 'href="/p/alpha/"' in html  # the way back
    assert 'href="/p/alpha/jobs/"' in _shell(html)


@pytest.mark.django_db
def test_a_404_of_a_project_one_is_not_in_reveals_nothing(
    owner_client: Client, other_project: Project
) -> None:
    owner_client.get("/p/alpha/")
    response = owner_client.get("/p/beta/jobs/")
    assert response.status_code == 404
    html = response.content.decode()
    assert other_project.name not in html and "/p/beta/" not in html
    assert "<summary>Alpha</summary>" in html  # the shell stays in the user's own project


@pytest.mark.django_db
def test_a_404_for_a_visitor_is_a_page_with_a_way_to_log_in(client: Client) -> None:
    response = client.get("/nowhere/")
    assert response.status_code == 404
    assert 'data-testid="not-found"' in response.content.decode()
    assert 'href="/login/"' in response.content.decode()


@pytest.mark.django_db
def test_the_gpu_quota_is_labelled_gpu_quota(admin_user: Any, project: Project) -> None:
    add_member(project, admin_user)
    html = logged_in(admin_user).get("/projects/new/").content.decode()
    assert ">GPU quota</label>" in html and "Gpu quota" not in html


@pytest.mark.django_db
def test_pages_and_polls_of_the_same_project_do_not_write_the_session(
    owner_client: Client, project: Project
) -> None:
    """The session row is written when the project changes, not at every poll of every page."""
    from django.contrib.sessions.models import Session

    owner_client.get("/p/alpha/jobs/")  # the first page of the project: remembered
    key = owner_client.session.session_key
    saved = Session.objects.get(session_key=key).expire_date
    for path in ["/p/alpha/jobs/", "/p/alpha/buckets/", "/p/alpha/jobs/"]:
        assert owner_client.get(path).status_code == 200
    assert Session.objects.get(session_key=key).expire_date == saved
    assert owner_client.session["project"] == "alpha"


@pytest.mark.django_db
def test_a_poll_does_not_build_the_project_switcher(owner_client: Client, project: Project) -> None:
    """A page's htmx polls (its log twice a second, per viewer) render no top bar, so they do
    not list the user's projects for its switcher; the page itself still does."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def switcher_queries(**headers: str) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert owner_client.get("/p/alpha/jobs/", **headers).status_code == 200
        ordered = 'ORDER BY "projects_project"."name" ASC LIMIT 200'  # the switcher's list
        return [q["sql"] for q in captured.captured_queries if ordered in q["sql"]]

    assert len(switcher_queries()) == 1
    assert switcher_queries(HTTP_HX_REQUEST="true") == []
