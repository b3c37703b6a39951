"""Projects, roles and the project switcher."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.test import Client
from rest_framework.test import APIClient

from controlpanel.accounts.models import User
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Membership, Project, Role
from controlpanel.projects.services import member_set_role
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
    quotas = {"cpu_quota": 64, "memory_gib_quota": 512, "pod_quota": 10, "storage_gib_quota": 0}
    fields = {
        "name": "Vision",
        "slug": "vision",
        "gpu_quota": 2,
        "monthly_budget": "1000.50",
        "notebook_idle_minutes": 60,
    }
    negative = admin.post("/projects/new/", fields | quotas | {"cpu_quota": -1})
    assert negative.status_code == 400 and not Project.objects.filter(slug="vision").exists()
    ok = admin.post("/projects/new/", fields | quotas)
    assert ok.status_code == 302
    vision = Project.objects.get(slug="vision")
    assert str(vision.monthly_budget) == "1000.50"
    assert {name: getattr(vision, name) for name in quotas} == quotas
    page = admin.get("/p/vision/").content.decode()
    assert "64 vCPU at once" in page and "512 GiB at once" in page
    assert "10 jobs running at once" in page and "Storage quota</dt><dd>no limit" in page


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


HOOK = "https://hooks.example.com/ajuste?team=7"
SETTINGS = "/p/alpha/settings/"  # the job webhook is among the project's settings


def _raw_secret(project: Project) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT webhook_secret FROM projects_project WHERE id = %s", [project.pk])
        return str(cursor.fetchone()[0])


def test_manager_sets_webhook_and_gets_a_secret(owner_client: Client, project: Project) -> None:
    made = owner_client.post(SETTINGS, {"action": "webhook-save", "webhook_url": HOOK})
    project.refresh_from_db()
    secret = project.webhook_secret
    assert project.webhook_url == HOOK and len(secret) == 43  # token_urlsafe(32)
    page = made.content.decode()
    assert made.status_code == 200 and secret in page and "Copy the new signing secret" in page
    assert "no-store" in made["Cache-Control"]
    raw = _raw_secret(project)
    assert raw.startswith("gAAAA") and secret not in raw  # Fernet, as datastore credentials
    again = owner_client.post(
        SETTINGS, {"action": "webhook-save", "webhook_url": HOOK.replace("7", "8")}
    )
    assert again.status_code == 302  # a new URL keeps the secret
    project.refresh_from_db()
    assert project.webhook_secret == secret and project.webhook_url.endswith("team=8")
    shown = owner_client.get(SETTINGS).content.decode()
    assert secret not in shown and f"…{secret[-4:]}" in shown
    revealed = owner_client.post(SETTINGS, {"action": "webhook-reveal"})
    assert secret in revealed.content.decode() and "no-store" in revealed["Cache-Control"]
    rotated = owner_client.post(SETTINGS, {"action": "webhook-rotate"})
    project.refresh_from_db()
    assert project.webhook_secret != secret and project.webhook_secret in rotated.content.decode()
    removed = owner_client.post(SETTINGS, {"action": "webhook-save", "webhook_url": ""})
    assert removed.status_code == 302
    project.refresh_from_db()
    assert project.webhook_url == ""


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://files.example.com/in", "Use an http:// or https:// URL (not ftp:)."),
        ("javascript:alert(1)", "Use an http:// or https:// URL (not javascript:)."),
        ("hooks.example.com/in", "Use an http:// or https:// URL."),
        ("https://bot:hunter2@hooks.example.com/in", "Remove the user name and password"),
        ("https://@hooks.example.com/in", "Remove the user name and password"),
        ("http:///in", "The URL has no host name."),
        ("https://exa mple.com/", "Enter a valid URL."),
        ("https://hooks.example.com/" + "x" * 200, "at most 200 characters"),
    ],
)
def test_bad_webhook_url_is_refused_precisely(
    owner_client: Client, project: Project, url: str, error: str
) -> None:
    project.webhook_url, project.webhook_secret = HOOK, "k" * 43
    project.save()
    response = owner_client.post(SETTINGS, {"action": "webhook-save", "webhook_url": url})
    page = response.content.decode()
    assert response.status_code == 400 and error in page and page.count('class="field-error"') == 1
    project.refresh_from_db()
    assert (project.webhook_url, project.webhook_secret) == (HOOK, "k" * 43)


def test_only_managers_touch_the_webhook(
    member: User, outsider_client: Client, project: Project
) -> None:
    project.webhook_url, project.webhook_secret = HOOK, "k" * 43
    project.save()
    member_client = logged_in(member)
    page = member_client.get("/p/alpha/").content.decode()
    assert HOOK not in page and "k" * 8 not in page and 'name="webhook_url"' not in page
    assert "/p/alpha/settings/" not in page  # no link to a page the member cannot open
    settings_page = member_client.get(SETTINGS)
    assert settings_page.status_code == 403 and HOOK not in settings_page.content.decode()
    for action in ("webhook-save", "webhook-reveal", "webhook-rotate"):
        data = {"action": action, "webhook_url": "https://evil.example.com/"}
        denied = member_client.post(SETTINGS, data)
        assert denied.status_code == 403 and "k" * 8 not in denied.content.decode()
        assert outsider_client.post(SETTINGS, data).status_code == 404
        anonymous = Client().post(SETTINGS, data)
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    project.refresh_from_db()
    assert (project.webhook_url, project.webhook_secret) == (HOOK, "k" * 43)


def test_rotate_needs_a_url(owner_client: Client, project: Project) -> None:
    response = owner_client.post(SETTINGS, {"action": "webhook-rotate"}, follow=True)
    assert "Set a webhook URL first." in response.content.decode()
    project.refresh_from_db()
    assert project.webhook_secret == ""


def test_webhook_secret_stays_out_of_the_api(owner_api: APIClient, project: Project) -> None:
    project.webhook_url, project.webhook_secret = HOOK, "k" * 43
    project.save()
    for path in ("/api/v1/projects/", "/api/v1/projects/alpha/"):
        body = owner_api.get(path).content.decode()
        assert "k" * 8 not in body and "webhook" not in body


def test_migration_encrypts_secrets_and_gives_urls_one(transactional_db: None) -> None:
    from django.db.migrations.executor import MigrationExecutor

    from controlpanel.buckets.crypto import decrypt

    before, after = (
        [("projects", "0002_project_integrations")],
        [("projects", "0003_webhook_secret_encrypted")],
    )
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    with connection.cursor() as cursor:
        for slug, url, secret in [("a", HOOK, "plain"), ("b", HOOK, ""), ("c", "", "")]:
            cursor.execute(
                "INSERT INTO projects_project (slug, name, gpu_quota, monthly_budget, "
                "notebook_idle_minutes, kueue_queue, webhook_url, webhook_secret, created_at) "
                "VALUES (%s, %s, 1, 0, 0, '', %s, %s, now())",
                [slug, slug, url, secret],
            )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    # Only the columns 0003 has: later migrations add fields the model reads by default.
    then = Project.objects.only("slug", "webhook_secret")
    secrets = {p.slug: p.webhook_secret for p in then}
    assert secrets["a"] == "plain" and len(secrets["b"]) == 43 and secrets["c"] == ""
    raw = {p.slug: _raw_secret(p) for p in then}
    assert decrypt(raw["a"]) == "plain" and raw["c"] == ""
    executor = MigrationExecutor(connection)
    executor.migrate(before)  # and back: plain text again
    with connection.cursor() as cursor:
        cursor.execute("SELECT webhook_secret FROM projects_project WHERE slug = 'a'")
        assert cursor.fetchone()[0] == "plain"
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())  # the schema the next tests expect


def test_two_managers_demoting_each_other_at_once_keep_one(transactional_db: None) -> None:
    """Each demotion runs in its own transaction; the first holds its transaction open until
    the second is seen waiting on a lock, or has finished (the race COUNT ... FOR UPDATE lost:
    both counted two managers and both were demoted)."""
    project = ProjectFactory(slug="race")
    first, second = (
        add_member(project, UserFactory(username=name), Role.MANAGER) for name in ("ann", "bob")
    )
    access = ProjectAccess(project=project, role=Role.MANAGER, is_admin=False)
    second_done = threading.Event()
    outcome: dict[str, str] = {}

    def demote_second() -> None:
        try:
            member_set_role(access=access, membership=second, role=Role.MEMBER)
            outcome["second"] = "demoted"
        except ValidationError as exc:
            outcome["second"] = exc.messages[0]
        finally:
            connection.close()
            second_done.set()

    def someone_waits_on_a_lock() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            return bool(cursor.fetchone()[0])

    def demote_first_and_hold() -> None:
        try:
            with transaction.atomic():
                member_set_role(access=access, membership=first, role=Role.MEMBER)
                other = threading.Thread(target=demote_second)
                other.start()
                while not second_done.wait(0.05) and not someone_waits_on_a_lock():
                    pass
            outcome["first"] = "demoted"
            other.join(30)
        finally:
            connection.close()

    holder = threading.Thread(target=demote_first_and_hold)
    holder.start()
    holder.join(60)
    assert outcome == {"first": "demoted", "second": "A project keeps at least one manager."}
    assert Membership.objects.filter(project=project, role=Role.MANAGER).count() == 1


SECRET_VALUE = "hf-TOP-secret-4711"


def test_a_manager_sets_a_secret_whose_value_is_never_shown(
    owner_client: Client, owner_api: APIClient, project: Project, member: User
) -> None:
    from controlpanel.projects.models import ProjectSecret

    page = owner_client.post(
        "/p/alpha/secrets/", {"action": "set", "name": "HF_TOKEN", "value": SECRET_VALUE}
    )
    assert (page.status_code, page["Location"]) == (302, "/p/alpha/#secrets")
    secret = ProjectSecret.objects.get(project=project, name="HF_TOKEN")
    assert (secret.value, secret.updated_by.username) == (SECRET_VALUE, "owner")
    with connection.cursor() as cursor:  # encrypted at rest
        cursor.execute("SELECT value FROM projects_projectsecret")
        assert SECRET_VALUE not in cursor.fetchone()[0]
    # htmx: the section comes back; the password input is never filled
    fragment = owner_client.post(
        "/p/alpha/secrets/",
        {"action": "set", "name": "WANDB", "value": SECRET_VALUE},
        HTTP_HX_REQUEST="true",
    )
    assert fragment.status_code == 200 and b'data-secret="WANDB"' in fragment.content
    assert b"<html" not in fragment.content
    answers = [
        fragment,
        owner_client.get("/p/alpha/"),
        logged_in(member).get("/p/alpha/"),
        owner_api.get("/api/v1/projects/alpha/secrets/"),
        owner_api.post(
            "/api/v1/projects/alpha/secrets/",
            {"name": "HF_TOKEN", "value": SECRET_VALUE},
            format="json",
        ),
        owner_api.get("/api/v1/projects/alpha/"),
    ]
    for answer in answers:
        assert answer.status_code in (200, 201), answer.content
        assert SECRET_VALUE.encode() not in answer.content
    assert b'data-secret="HF_TOKEN"' in answers[2].content  # members see the names
    assert b'data-testid="secret-form"' not in answers[2].content  # and cannot set them
    listed = answers[3].json()
    assert [(s["name"], s["updated_by"]) for s in listed] == [
        ("HF_TOKEN", "owner"),
        ("WANDB", "owner"),
    ]
    assert set(listed[0]) == {"name", "updated_by", "updated_at"}


def test_a_member_cannot_set_or_delete_secrets(project: Project, member: User) -> None:
    from controlpanel.projects.models import ProjectSecret
    from tests.fixtures.panel import api_client_for

    ProjectSecret.objects.create(project=project, name="KEEP", value="v")
    client, api = logged_in(member), api_client_for(member)
    assert client.post("/p/alpha/secrets/", {"name": "X", "value": "y"}).status_code == 403
    assert client.post("/p/alpha/secrets/", {"action": "delete", "name": "KEEP"}).status_code == 403
    assert (
        api.post("/api/v1/projects/alpha/secrets/", {"name": "X", "value": "y"}).status_code == 403
    )
    assert api.delete("/api/v1/projects/alpha/secrets/KEEP/").status_code == 403
    assert api.get("/api/v1/projects/alpha/secrets/").status_code == 200
    assert list(ProjectSecret.objects.values_list("name", flat=True)) == ["KEEP"]


@pytest.mark.parametrize(
    ("data", "field", "message", "on_page"),
    [
        ({"name": "1BAD", "value": "v"}, "name", "'1BAD' is not a valid secret name.", None),
        (
            {"name": "A" * 64, "value": "v"},
            "name",
            "no more than 63 characters",
            "Ensure this value has at most 63",
        ),
        ({"name": "OK", "value": ""}, "value", "may not be blank", "This field is required"),
    ],
)
def test_a_bad_secret_is_refused_precisely_and_saves_nothing(
    owner_api: APIClient,
    owner_client: Client,
    project: Project,
    data: dict,
    field: str,
    message: str,
    on_page: str | None,
) -> None:
    from controlpanel.projects.models import ProjectSecret

    answer = owner_api.post("/api/v1/projects/alpha/secrets/", data, format="json")
    assert answer.status_code == 400 and message in str(answer.json()[field]), answer.json()
    page = owner_client.post("/p/alpha/secrets/", data | {"action": "set"}, HTTP_HX_REQUEST="true")
    assert page.status_code == 400
    error = f'<small class="field-error" role="alert">{on_page or message}'
    assert error in page.content.decode().replace("&#x27;", "'"), page.content.decode()
    assert not ProjectSecret.objects.exists()


def test_a_manager_deletes_a_secret(
    owner_client: Client, owner_api: APIClient, project: Project
) -> None:
    from controlpanel.projects.models import ProjectSecret

    ProjectSecret.objects.create(project=project, name="ONE", value="v")
    ProjectSecret.objects.create(project=project, name="TWO", value="v")
    assert owner_api.delete("/api/v1/projects/alpha/secrets/ONE/").status_code == 204
    assert owner_api.delete("/api/v1/projects/alpha/secrets/ONE/").status_code == 404
    page = owner_client.post("/p/alpha/secrets/", {"action": "delete", "name": "TWO"})
    assert page.status_code == 302
    assert not ProjectSecret.objects.exists()


def test_the_secrets_section_says_every_member_can_read_a_value(
    owner_client: Client, member: User, project: Project
) -> None:
    """Stored encrypted and never shown by the panel, yet any member who runs a job can print
    the value from it (issue 25): the page says so to the managers who set them and to members."""
    for client in (owner_client, logged_in(member)):
        page = client.get("/p/alpha/").content.decode()
        assert "Any member of the project can read these values" in page
