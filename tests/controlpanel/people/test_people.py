"""The site admins' people pages: create an account (set-password link, never a chosen
password), send a reset link, deactivate (tokens and sessions end at once; running work
listed, stopped or handed over), reactivate. Nobody else reaches them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from controlpanel.accounts.models import ApiToken, User
from controlpanel.accounts.services import token_create
from controlpanel.audit.models import AuditEvent
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Membership, Project, Role
from tests.fixtures.panel import PASSWORD, UserFactory, logged_in

NEW_PASSWORD = "a long and unusual passphrase 42"


@pytest.fixture
def admin_client(admin_user: User) -> Client:
    return logged_in(admin_user)


def _set_password(link: str, password: str = NEW_PASSWORD) -> Any:
    client = Client()
    form = client.get(link.removeprefix("http://127.0.0.1:8000"), follow=True)
    assert form.status_code == 200
    return client.post(
        form.request["PATH_INFO"], {"new_password1": password, "new_password2": password}
    )


def test_people_pages_are_for_site_admins_only(
    owner_client: Client, member: User, outsider_client: Client
) -> None:
    for url in ["/people/", "/people/new/", f"/people/{member.pk}/"]:
        assert Client().get(url).status_code == 302  # to log in
        assert owner_client.get(url).status_code == 404  # a project manager is no site admin
        assert outsider_client.get(url).status_code == 404
    for action in ("deactivate", "password-link"):
        assert owner_client.post(f"/people/{member.pk}/", {"action": action}).status_code == 404
    member.refresh_from_db()
    assert member.is_active and member.check_password(PASSWORD)


def test_admin_creates_an_account_who_sets_a_password_by_link(
    admin_client: Client, project: Project, mailoutbox: list[Any]
) -> None:
    answer = admin_client.post(
        "/people/new/",
        {
            "username": "newhire",
            "email": "newhire@example.com",
            "project": project.slug,
            "role": "manager",
        },
    )
    assert answer.status_code == 200 and b'data-testid="password-link"' in answer.content
    user = User.objects.get(username="newhire")
    assert not user.has_usable_password()
    assert Membership.objects.get(user=user, project=project).role == Role.MANAGER
    (message,) = mailoutbox
    link = re.search(r"http://\S+", message.body).group(0)
    assert link.encode() in answer.content  # shown once to the admin too
    done = _set_password(link)
    assert done.status_code == 302 and done["Location"] == "/password/set/done/"
    user.refresh_from_db()
    assert user.check_password(NEW_PASSWORD)
    # Once only.
    again = Client().get(link.removeprefix("http://127.0.0.1:8000"), follow=True)
    assert b'data-testid="bad-link"' in again.content


def test_create_refuses_bad_input(admin_client: Client, owner: User) -> None:
    for data, why in [
        ({"username": "owner", "email": "x@example.com"}, b"already exists"),
        ({"username": "z", "email": "owner@example.com"}, b"already uses"),
        ({"username": "bad name!", "email": "y@example.com"}, b"Enter a valid username"),
    ]:
        answer = admin_client.post("/people/new/", {"role": "member", **data})
        assert answer.status_code == 400 and why in answer.content, answer.content[-1500:]
    assert User.objects.count() == 2  # admin and owner


def test_password_reset_link_voids_the_old_password_and_sessions(
    admin_client: Client, member: User, mailoutbox: list[Any]
) -> None:
    session = logged_in(member)
    answer = admin_client.post(f"/people/{member.pk}/", {"action": "password-link"})
    assert answer.status_code == 200
    member.refresh_from_db()
    assert not member.check_password(PASSWORD)
    assert session.get("/settings/").status_code == 302  # the session ended
    link = re.search(r"http://\S+", mailoutbox[0].body).group(0)
    _set_password(link)
    member.refresh_from_db()
    assert member.check_password(NEW_PASSWORD)


def test_deactivation_stops_tokens_and_sessions_at_once(
    admin_client: Client, member: User, project: Project
) -> None:
    session = logged_in(member)
    _, raw = token_create(user=member, name="ci")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert session.get(f"/p/{project.slug}/").status_code == 200
    assert api.get("/api/v1/me/").status_code == 200
    answer = admin_client.post(f"/people/{member.pk}/", {"action": "deactivate"})
    assert answer.status_code == 302
    assert session.get(f"/p/{project.slug}/").status_code == 302  # to log in
    assert api.get("/api/v1/me/").status_code == 401
    assert not ApiToken.objects.filter(user=member, revoked_at=None).exists()
    refused = Client().post("/login/", {"username": "member", "password": PASSWORD})
    assert refused.status_code == 200 and "_auth_user_id" not in refused.client.session
    from django.contrib.sessions.models import Session

    assert not [
        s for s in Session.objects.all() if s.get_decoded().get("_auth_user_id") == str(member.pk)
    ]
    # Reactivated: may log in again, the old tokens stay revoked.
    admin_client.post(f"/people/{member.pk}/", {"action": "reactivate"})
    assert Client().post("/login/", {"username": "member", "password": PASSWORD}).status_code == 302
    assert api.get("/api/v1/me/").status_code == 401


def test_an_admin_cannot_deactivate_themself(admin_client: Client, admin_user: User) -> None:
    admin_client.post(f"/people/{admin_user.pk}/", {"action": "deactivate"})
    admin_user.refresh_from_db()
    assert admin_user.is_active


def _job(project: Project, owner: User, state: str = JobState.RUNNING) -> Job:
    from controlpanel.flavors.models import Flavor

    return Job.objects.create(
        project=project,
        owner=owner,
        name="train",
        image="busybox",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=state,
        launched_run=1,
    )


def test_running_work_is_listed_stopped_or_handed_over(
    admin_client: Client, member: User, owner: User, outsider: User, project: Project
) -> None:
    running = _job(project, member)
    other = _job(project, member, JobState.QUEUED)
    _job(project, member, JobState.DONE)
    admin_client.post(f"/people/{member.pk}/", {"action": "deactivate"})
    page = admin_client.get(f"/people/{member.pk}/")
    assert page.content.count(b'name="action" value="hand-over"') == 2
    url = f"/people/{member.pk}/workloads/{running.pk}/"
    assert admin_client.post(url, {"action": "stop"}).status_code == 302
    running.refresh_from_db()
    assert running.stop_requested and running.state == JobState.INTERRUPTING
    # Handed over to a member of the project, never to someone outside it.
    refused = admin_client.post(
        f"/people/{member.pk}/workloads/{other.pk}/", {"action": "hand-over", "to": "outsider"}
    )
    assert refused.status_code == 302
    other.refresh_from_db()
    assert other.owner == member
    admin_client.post(
        f"/people/{member.pk}/workloads/{other.pk}/", {"action": "hand-over", "to": "owner"}
    )
    other.refresh_from_db()
    assert other.owner == owner
    # Nobody but a site admin acts on them.
    assert logged_in(owner).post(url, {"action": "stop"}).status_code == 404


def test_members_page_links_people_for_admins_and_shows_deactivated(
    admin_client: Client, owner_client: Client, member: User, project: Project
) -> None:
    member.is_active = False
    member.save()
    page = admin_client.get(f"/p/{project.slug}/members/")
    assert f"/people/{member.pk}/".encode() in page.content and b"deactivated" in page.content
    assert (
        f"/people/{member.pk}/".encode()
        not in owner_client.get(f"/p/{project.slug}/members/").content
    )


def test_people_list_searches(admin_client: Client, owner: User) -> None:
    UserFactory(username="zed", email="zed@corp.example")
    page = admin_client.get("/people/?q=corp")
    assert b"zed" in page.content and b">owner<" not in page.content


def test_a_staff_admin_cannot_reset_a_superusers_password(
    admin_user: User, member: User, mailoutbox: list[Any]
) -> None:
    """The reproduction (issue 25): a staff admin who is no superuser asked for root's
    set-password link, was handed it, and chose root's password. Refused as deactivation is."""
    staff = UserFactory(username="staff", is_staff=True)
    client = logged_in(staff)
    answer = client.post(f"/people/{admin_user.pk}/", {"action": "password-link"}, follow=True)
    assert answer.status_code == 200
    assert b"Only a superuser can reset a superuser&#x27;s password" in answer.content
    assert b'data-testid="password-link"' not in answer.content and mailoutbox == []
    admin_user.refresh_from_db()
    assert admin_user.check_password(PASSWORD)
    assert not AuditEvent.objects.filter(action="user.password_reset").exists()
    # A staff admin still resets a plain account, a superuser anyone's; both are audited.
    assert client.post(f"/people/{member.pk}/", {"action": "password-link"}).status_code == 200
    logged_in(admin_user).post(f"/people/{staff.pk}/", {"action": "password-link"})
    events = AuditEvent.objects.filter(action="user.password_reset").order_by("pk")
    assert [(e.actor_username, e.target_id) for e in events] == [
        ("staff", str(member.pk)),
        ("admin", str(staff.pk)),
    ]
    assert all("http" not in str(e.details) for e in events)  # never the link


def test_create_and_reactivate_are_audited(admin_client: Client, project: Project) -> None:
    admin_client.post(
        "/people/new/",
        {
            "username": "newhire",
            "email": "newhire@example.com",
            "project": project.slug,
            "role": "member",
        },
    )
    user = User.objects.get(username="newhire")
    created = AuditEvent.objects.get(action="user.create")
    assert (created.actor_username, created.target_id) == ("admin", str(user.pk))
    assert created.project_slug == "alpha"
    assert created.details == {
        "username": "newhire",
        "email": "newhire@example.com",
        "is_staff": False,
        "role": "member",
    }
    admin_client.post(f"/people/{user.pk}/", {"action": "deactivate"})
    admin_client.post(f"/people/{user.pk}/", {"action": "reactivate"})
    reactivated = AuditEvent.objects.get(action="user.reactivate")
    assert (reactivated.actor_username, reactivated.target_id) == ("admin", str(user.pk))


def test_the_untrusted_local_backend_refuses_a_second_active_user(
    admin_client: Client, member: User, settings: Any
) -> None:
    """COMPUTE_BACKEND=local, AJUSTE_LOCAL_BACKEND_TRUSTED unset: the guard used to run only at
    start-up, so an account made later got JupyterLab, a shell as the panel's OS user."""
    settings.COMPUTE_BACKEND, settings.AJUSTE_LOCAL_BACKEND_TRUSTED = "local", False
    User.objects.exclude(username="admin").update(is_active=False)
    answer = admin_client.post(
        "/people/new/", {"username": "second", "email": "second@example.com", "role": "member"}
    )
    assert answer.status_code == 400
    assert b"AJUSTE_LOCAL_BACKEND_TRUSTED=1" in answer.content
    assert not User.objects.filter(username="second").exists()
    back = admin_client.post(f"/people/{member.pk}/", {"action": "reactivate"}, follow=True)
    assert b"AJUSTE_LOCAL_BACKEND_TRUSTED=1" in back.content
    member.refresh_from_db()
    assert not member.is_active
    settings.COMPUTE_BACKEND = "kubernetes"  # on a cluster, each workload is its own pod
    admin_client.post(f"/people/{member.pk}/", {"action": "reactivate"})
    member.refresh_from_db()
    assert member.is_active


def test_with_oidc_only_accounts_are_made_at_their_first_sign_in(
    admin_user: User, settings: Any
) -> None:
    """An account made here would never be linked to anyone's identity (no address linking),
    and has no password to log in with to connect one: refused with the reason."""
    settings.OIDC_ISSUER, settings.OIDC_ONLY = "https://id.example.com/realms/acme", True
    admin_client = Client()
    admin_client.force_login(admin_user, backend="controlpanel.accounts.backends.OidcBackend")
    answer = admin_client.post(
        "/people/new/", {"username": "pre", "email": "pre@example.com", "role": "member"}
    )
    assert answer.status_code == 400 and b"at their first sign-in" in answer.content
    assert not User.objects.filter(username="pre").exists()


def test_the_reset_service_refuses_a_staff_admin_on_a_superuser(admin_user: User) -> None:
    """The same rule at the service layer (the API or a command would call it): nothing made,
    the password still works."""
    from django.core.exceptions import PermissionDenied

    from controlpanel.accounts import people

    staff = UserFactory(username="staff", is_staff=True)
    with pytest.raises(PermissionDenied, match="Only a superuser"):
        people.user_password_reset(by=staff, user=admin_user)
    admin_user.refresh_from_db()
    assert admin_user.check_password(PASSWORD)
    assert people.user_password_reset(by=admin_user, user=admin_user).startswith("http")
