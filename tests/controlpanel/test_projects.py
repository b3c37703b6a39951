"""Projects, roles and the project switcher."""

from __future__ import annotations

from django.test import Client
from rest_framework.test import APIClient

from controlpanel.accounts.models import User
from controlpanel.projects.models import Membership, Project, Role
from tests.fixtures.panel import ProjectFactory, UserFactory, add_member, logged_in


def test_home_opens_the_users_project(owner_client: Client, project: Project) -> None:
    response = owner_client.get("/")
    assert response.status_code == 302 and response["Location"] == "/p/alpha/"


def test_user_without_project_gets_a_clear_page(db: None) -> None:
    response = logged_in(UserFactory(username="loner")).get("/")
    assert response.status_code == 200
    assert b"not in any project" in response.content


def test_anonymous_is_sent_to_login(project: Project) -> None:
    response = Client().get("/p/alpha/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_unknown_or_foreign_project_is_404(owner_client: Client, other_project: Project) -> None:
    assert owner_client.get("/p/beta/").status_code == 404
    assert owner_client.get("/p/nope/").status_code == 404


def test_switcher_lists_only_my_projects(owner: User, other_project: Project) -> None:
    mine = ProjectFactory(slug="gamma", name="Gamma <i>")
    add_member(mine, owner)
    page = logged_in(owner).get("/p/alpha/").content.decode()
    assert 'href="/p/gamma/"' in page and "Gamma &lt;i&gt;" in page
    assert "/p/beta/" not in page


def test_manager_adds_member_and_member_cannot(
    owner_client: Client, member: User, project: Project
) -> None:
    newbie = UserFactory(username="newbie")
    response = owner_client.post("/p/alpha/members/", {"username": "newbie", "role": "member"})
    assert response.status_code == 302
    assert Membership.objects.filter(project=project, user=newbie, role=Role.MEMBER).exists()
    other = UserFactory(username="other")
    denied = logged_in(member).post("/p/alpha/members/", {"username": "other", "role": "manager"})
    assert denied.status_code == 403
    assert not Membership.objects.filter(user=other).exists()


def test_add_member_bad_input(owner_client: Client, member: User) -> None:
    unknown = owner_client.post("/p/alpha/members/", {"username": "ghost", "role": "member"})
    assert unknown.status_code == 400 and "No active user named “ghost”" in unknown.content.decode()
    twice = owner_client.post("/p/alpha/members/", {"username": "member", "role": "member"})
    assert twice.status_code == 400 and b"already a member" in twice.content
    badrole = owner_client.post("/p/alpha/members/", {"username": "member", "role": "god"})
    assert badrole.status_code == 400


def test_last_manager_is_kept(owner_client: Client, owner: User, project: Project) -> None:
    mine = Membership.objects.get(user=owner, project=project)
    owner_client.post(f"/p/alpha/members/{mine.id}/", {"action": "remove"})
    assert Membership.objects.filter(pk=mine.pk).exists()
    owner_client.post(f"/p/alpha/members/{mine.id}/", {"action": "role", "role": "member"})
    mine.refresh_from_db()
    assert mine.role == Role.MANAGER


def test_manager_changes_role_and_removes(
    owner_client: Client, member: User, project: Project
) -> None:
    m = Membership.objects.get(user=member)
    owner_client.post(f"/p/alpha/members/{m.id}/", {"action": "role", "role": "manager"})
    m.refresh_from_db()
    assert m.role == Role.MANAGER
    owner_client.post(f"/p/alpha/members/{m.id}/", {"action": "remove"})
    assert not Membership.objects.filter(pk=m.pk).exists()


def test_only_admins_create_projects(owner_client: Client, admin_user: User) -> None:
    assert owner_client.get("/projects/new/").status_code == 302  # to the admin login
    admin = logged_in(admin_user)
    bad = admin.post(
        "/projects/new/",
        {
            "name": "X",
            "slug": "Bad Slug!",
            "gpu_quota": 2,
            "monthly_budget": "10",
            "notebook_idle_minutes": 60,
        },
    )
    assert bad.status_code == 400 and b"lowercase letters" in bad.content
    ok = admin.post(
        "/projects/new/",
        {
            "name": "Vision",
            "slug": "vision",
            "gpu_quota": 2,
            "monthly_budget": "1000.50",
            "notebook_idle_minutes": 60,
        },
    )
    assert ok.status_code == 302
    assert str(Project.objects.get(slug="vision").monthly_budget) == "1000.50"


def test_staff_sees_every_project(
    admin_user: User, project: Project, other_project: Project
) -> None:
    assert logged_in(admin_user).get("/p/beta/").status_code == 200


def test_api_projects_are_scoped(owner_api: APIClient, other_project: Project) -> None:
    listed = owner_api.get("/api/v1/projects/").json()["results"]
    assert [p["slug"] for p in listed] == ["alpha"]
    assert owner_api.get("/api/v1/projects/beta/").status_code == 404
    assert owner_api.post("/api/v1/projects/", {"slug": "x", "name": "X"}).status_code == 403


def test_api_members(owner_api: APIClient, member: User, project: Project) -> None:
    UserFactory(username="newbie")
    listed = owner_api.get("/api/v1/projects/alpha/members/").json()
    assert {m["username"] for m in listed} == {"owner", "member"}
    added = owner_api.post("/api/v1/projects/alpha/members/", {"username": "newbie"}, format="json")
    assert added.status_code == 201 and added.json()["role"] == "member"
    mid = added.json()["id"]
    changed = owner_api.patch(
        f"/api/v1/projects/alpha/members/{mid}/", {"role": "manager"}, format="json"
    )
    assert changed.json()["role"] == "manager"
    assert (
        owner_api.post(
            "/api/v1/projects/alpha/members/", {"username": "ghost"}, format="json"
        ).status_code
        == 400
    )
    assert owner_api.delete(f"/api/v1/projects/alpha/members/{mid}/").status_code == 204


def test_openapi_schema_and_docs(owner_client: Client) -> None:
    schema = owner_client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    assert "/api/v1/projects/" in schema.json()["paths"]
    docs = owner_client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()
