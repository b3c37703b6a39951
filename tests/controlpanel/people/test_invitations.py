"""Invitations: a manager invites by e-mail; the link works once, until it expires or is
revoked, for the invited address only; nobody is added before they open the link and confirm
(an existing account neither); members and other projects' people cannot invite."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from controlpanel.accounts import invitations, oidc
from controlpanel.accounts.models import Invitation, User, hash_token
from controlpanel.projects.access import project_access
from controlpanel.projects.models import Membership, Project, Role
from tests.fixtures.oidc import configure_panel, oidc_provider, sign_in_over_http  # noqa: F401
from tests.fixtures.panel import UserFactory, add_member, logged_in

NEW_PASSWORD = "a long and unusual passphrase 42"


def _invite(client: Client, project: Project, email: str, role: str = "member") -> Any:
    return client.post(f"/p/{project.slug}/members/invite/", {"email": email, "role": role})


def _link(message: Any) -> str:
    found = re.search(r"http://\S+/invite/(\S+)/", message.body)
    assert found, message.body
    return f"/invite/{found.group(1)}/"


def _sign_up(link: str, username: str = "newbie", **more: str) -> Any:
    client = Client()
    data = {"username": username, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD}
    return client, client.post(link, {**data, **more})


def test_invite_sign_up_and_land_in_the_project(
    owner_client: Client, owner: User, project: Project, mailoutbox: list[Any]
) -> None:
    answer = _invite(owner_client, project, "New.Person@example.com", "manager")
    assert answer.status_code == 302
    invitation = Invitation.objects.get()
    assert invitation.status == "pending" and invitation.role == "manager"
    assert invitation.invited_by == owner
    (message,) = mailoutbox
    assert message.to == ["New.Person@example.com"] and "Alpha" in message.subject
    link = _link(message)
    raw = link.split("/")[2]
    assert invitation.digest == hash_token(raw) and raw not in invitation.digest  # hash only
    page = owner_client.get(f"/p/{project.slug}/members/")
    assert b"New.Person@example.com" in page.content and b"pending" in page.content

    form = Client().get(link)
    assert form.status_code == 200 and b"Create my account and join" in form.content
    client, joined = _sign_up(link, first_name="New", last_name="Person")
    assert joined.status_code == 302 and joined["Location"] == f"/p/{project.slug}/"
    user = User.objects.get(username="newbie")
    assert user.email == "New.Person@example.com" and user.check_password(NEW_PASSWORD)
    assert Membership.objects.get(user=user, project=project).role == Role.MANAGER
    assert client.get(f"/p/{project.slug}/").status_code == 200  # signed in, in the project
    invitation.refresh_from_db()
    assert invitation.status == "accepted" and invitation.accepted_by == user
    assert b"pending" not in owner_client.get(f"/p/{project.slug}/members/").content


def test_the_link_works_once(owner_client: Client, project: Project, mailoutbox: list[Any]) -> None:
    _invite(owner_client, project, "once@example.com")
    link = _link(mailoutbox[0])
    _sign_up(link)
    again = Client().get(link)
    assert again.status_code == 410 and b"already used" in again.content
    _, second = _sign_up(link, username="someone-else")
    assert second.status_code == 410
    assert not User.objects.filter(username="someone-else").exists()


def test_an_expired_link_is_refused(
    owner_client: Client, project: Project, mailoutbox: list[Any], settings: Any
) -> None:
    settings.INVITATION_DAYS = 2
    _invite(owner_client, project, "late@example.com")
    invitation = Invitation.objects.get()
    assert timedelta(days=2) - (invitation.expires_at - invitation.created_at) < timedelta(
        seconds=5
    )
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    link = _link(mailoutbox[0])
    page = Client().get(link)
    assert page.status_code == 410 and b"expired" in page.content
    _, refused = _sign_up(link)
    assert refused.status_code == 410
    assert not User.objects.filter(username="newbie").exists()
    members = owner_client.get(f"/p/{project.slug}/members/").content
    assert b'data-testid="pending-invitations"' not in members


def test_a_revoked_link_is_refused(
    owner_client: Client, project: Project, mailoutbox: list[Any]
) -> None:
    _invite(owner_client, project, "gone@example.com")
    invitation = Invitation.objects.get()
    answer = owner_client.post(f"/p/{project.slug}/invitations/{invitation.pk}/revoke/")
    assert answer.status_code == 302
    link = _link(mailoutbox[0])
    assert Client().get(link).status_code == 410
    _, refused = _sign_up(link)
    assert refused.status_code == 410 and not User.objects.filter(username="newbie").exists()


def test_inviting_again_replaces_the_pending_link(
    owner_client: Client, project: Project, mailoutbox: list[Any]
) -> None:
    _invite(owner_client, project, "twice@example.com")
    _invite(owner_client, project, "Twice@example.com")
    first, second = _link(mailoutbox[0]), _link(mailoutbox[1])
    assert Client().get(first).status_code == 410
    assert Client().get(second).status_code == 200


def test_a_made_up_link_is_404(db: Any) -> None:
    assert Client().get("/invite/inv_nothing-here/").status_code == 404
    assert Client().get("/invite/whatever/").status_code == 404


def test_the_wrong_account_cannot_accept(
    owner_client: Client,
    project: Project,
    outsider_client: Client,
    outsider: User,
    mailoutbox: list[Any],
) -> None:
    _invite(owner_client, project, "right@example.com")
    link = _link(mailoutbox[0])
    page = outsider_client.get(link)
    assert page.status_code == 403 and b"right@example.com" in page.content
    assert outsider_client.post(link, {"action": "join"}).status_code == 403
    assert not Membership.objects.filter(project=project, user=outsider).exists()
    assert Invitation.objects.get().status == "pending"


def test_an_account_with_the_address_logs_in_then_joins(
    owner_client: Client, project: Project, mailoutbox: list[Any]
) -> None:
    """A user who was made since the invitation (or had no project) signs in and joins."""
    _invite(owner_client, project, "later@example.com")
    link = _link(mailoutbox[0])
    later = UserFactory(username="later", email="LATER@example.com")
    anonymous = Client().get(link)
    assert b"log in" in anonymous.content and b"Create my account" not in anonymous.content
    _, refused = _sign_up(link, username="dup")  # no second account with that address
    assert not User.objects.filter(username="dup").exists()
    assert refused.status_code == 200
    client = logged_in(later)
    assert client.get(link).status_code == 200
    joined = client.post(link, {"action": "join"})
    assert joined.status_code == 302
    assert Membership.objects.get(project=project, user=later).role == Role.MEMBER


def test_inviting_an_address_that_has_an_account_sends_a_link_and_names_nobody(
    owner_client: Client, project: Project, mailoutbox: list[Any]
) -> None:
    """Nobody is added by address alone: whoever has the address opens the link, signed in as
    the account that accepts, and confirms. The manager is not told whose address it is."""
    kay = UserFactory(username="kay", email="known@example.com")
    answer = _invite(owner_client, project, "KNOWN@example.com", "manager")
    assert answer.status_code == 302
    assert not Membership.objects.filter(project=project, user=kay).exists()
    assert Invitation.objects.get().status == "pending"
    (message,) = mailoutbox
    assert message.to == ["KNOWN@example.com"] and "kay" not in message.body
    said = owner_client.get(answer["Location"]).content
    assert b"Invitation sent to KNOWN@example.com" in said and b"kay" not in said
    again = _invite(owner_client, project, "known@example.com")
    assert again.status_code == 302 and b"kay" not in owner_client.get(again["Location"]).content
    client = logged_in(kay)
    link = _link(mailoutbox[1])
    assert client.get(link).status_code == 200
    assert not Membership.objects.filter(project=project, user=kay).exists()  # not on a GET
    assert client.post(link, {"action": "join"}).status_code == 302
    assert Membership.objects.get(project=project, user=kay).role == Role.MEMBER


def test_an_accepted_invitation_is_refused_by_the_service_too(
    owner: User, project: Project, mailoutbox: list[Any]
) -> None:
    """Single use at the service layer (the page-level test above is test_the_link_works_once):
    a second account with the same address, and a sign-up, both refused afterwards."""
    access = project_access(user=owner, slug=project.slug)
    invitations.invitation_create(access=access, by=owner, email="twin@example.com", role="manager")
    raw = _link(mailoutbox[0]).split("/")[2]
    first = UserFactory(username="first", email="twin@example.com")
    second = UserFactory(username="second", email="Twin@example.com")
    invitations.invitation_accept(raw=raw, user=first)
    with pytest.raises(ValidationError, match="already used"):
        invitations.invitation_accept(raw=raw, user=second)
    with pytest.raises(ValidationError, match="already used"):
        invitations.invitation_sign_up(raw=raw, username="third", password=NEW_PASSWORD)
    assert not Membership.objects.filter(project=project, user=second).exists()
    assert not User.objects.filter(username="third").exists()
    assert Invitation.objects.get().accepted_by == first


def test_bad_invitations_are_refused_and_change_nothing(
    owner_client: Client, project: Project, mailoutbox: list[Any]
) -> None:
    for email, role, why in [
        ("not-an-address", "member", b"valid email"),
        ("x@example.com", "owner", b"not one of the available choices"),
    ]:
        answer = _invite(owner_client, project, email, role)
        assert answer.status_code == 400 and why in answer.content, answer.content[-2000:]
    assert not Invitation.objects.exists() and mailoutbox == []


def test_a_mail_server_that_refuses_leaves_no_invitation(
    owner_client: Client, project: Project, settings: Any
) -> None:
    from tests.fixtures.oidc import free_port

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nothing listens
    answer = _invite(owner_client, project, "nomail@example.com")
    assert answer.status_code == 400 and b"could not be sent" in answer.content
    assert not Invitation.objects.exists()


def test_only_managers_invite_and_revoke(
    project: Project,
    owner_client: Client,
    member: User,
    outsider_client: Client,
    mailoutbox: list[Any],
) -> None:
    member_client = logged_in(member)
    assert _invite(member_client, project, "a@example.com").status_code == 403
    assert _invite(outsider_client, project, "a@example.com").status_code == 404
    assert _invite(Client(), project, "a@example.com").status_code == 302  # to log in
    assert not Invitation.objects.exists()
    _invite(owner_client, project, "b@example.com")
    invitation = Invitation.objects.get()
    revoke = f"/p/{project.slug}/invitations/{invitation.pk}/revoke/"
    assert member_client.post(revoke).status_code == 403
    assert outsider_client.post(revoke).status_code == 404
    assert Client().post(revoke).status_code == 302
    assert Invitation.objects.get().status == "pending"
    # The members page shows pending invitations to managers only.
    assert b"b@example.com" not in member_client.get(f"/p/{project.slug}/members/").content


def test_an_invitation_of_another_project_cannot_be_revoked_from_this_one(
    owner: User, project: Project, other_project: Project, mailoutbox: list[Any]
) -> None:
    from tests.fixtures.panel import add_member

    add_member(other_project, owner, Role.MANAGER)
    client = logged_in(owner)
    _invite(client, other_project, "c@example.com")
    invitation = Invitation.objects.get()
    answer = client.post(f"/p/{project.slug}/invitations/{invitation.pk}/revoke/")
    assert answer.status_code == 404
    assert Invitation.objects.get().status == "pending"


@pytest.mark.parametrize("username", ["bad name!", ""])
def test_a_bad_sign_up_says_why_and_makes_nothing(
    owner_client: Client, project: Project, mailoutbox: list[Any], username: str
) -> None:
    _invite(owner_client, project, "careful@example.com")
    link = _link(mailoutbox[0])
    _, answer = _sign_up(link, username=username)
    assert answer.status_code == 400
    _, weak = (
        Client(),
        Client().post(link, {"username": "careful", "password1": "123", "password2": "123"}),
    )
    assert weak.status_code == 400 and b"too short" in weak.content
    assert not User.objects.filter(email="careful@example.com").exists()
    assert Invitation.objects.get().status == "pending"


def test_user_text_is_escaped(owner: User, project: Project, mailoutbox: list[Any]) -> None:
    owner.first_name = "<script>alert(1)</script>"
    owner.save()
    _invite(logged_in(owner), project, "esc@example.com")
    page = Client().get(_link(mailoutbox[0]))
    assert b"<script>alert(1)" not in page.content and b"&lt;script&gt;" in page.content


def test_a_member_who_points_her_sso_address_at_a_future_hire_gains_nothing(
    owner_client: Client,
    project: Project,
    oidc_provider: Any,  # noqa: F811
    settings: Any,
    mailoutbox: list[Any],
) -> None:
    """The reproduction (issue 25): mia changes her address at the provider to the one of a
    hire-to-be, signs in; the manager invites that address as manager. She used to be made
    manager at once; now the link goes to the hire's mailbox and nothing changes for her."""
    configure_panel(settings, oidc_provider, site_url="http://testserver")
    oidc.oidc_client_reset()
    oidc_provider.user("mia", email="mia@corp.example")
    sign_in_over_http(Client(), oidc_provider, "mia")
    mia = User.objects.get(username="mia")
    add_member(project, mia, Role.MEMBER)
    oidc_provider.user("mia", email="hire@corp.example")  # the provider says it is verified
    sign_in_over_http(Client(), oidc_provider, "mia")
    assert _invite(owner_client, project, "hire@corp.example", "manager").status_code == 302
    assert Membership.objects.get(project=project, user=mia).role == Role.MEMBER
    assert Invitation.objects.get().status == "pending"
    assert [m.to for m in mailoutbox] == [["hire@corp.example"]]


def test_an_unverified_address_from_sso_never_accepts_an_invitation(
    owner_client: Client,
    project: Project,
    oidc_provider: Any,  # noqa: F811
    settings: Any,
    mailoutbox: list[Any],
) -> None:
    """An address the provider does not say is verified is not written to the account (not even
    with the old OIDC_TRUST_EMAIL=1): with a leaked link, the account still is not the
    invited one."""
    configure_panel(settings, oidc_provider, site_url="http://testserver", OIDC_TRUST_EMAIL=True)
    oidc.oidc_client_reset()
    oidc_provider.user("noa", email="noa@corp.example")
    sign_in_over_http(Client(), oidc_provider, "noa")
    noa = User.objects.get(username="noa")
    oidc_provider.user("noa", email="boss@corp.example", claims={"email_verified": False})
    session = Client()
    sign_in_over_http(session, oidc_provider, "noa")
    noa.refresh_from_db()
    assert noa.email == "noa@corp.example"
    _invite(owner_client, project, "boss@corp.example", "manager")
    link = _link(mailoutbox[0])
    assert session.get(link).status_code == 403
    assert session.post(link, {"action": "join"}).status_code == 403
    assert not Membership.objects.filter(project=project, user=noa).exists()


def test_a_sign_up_is_refused_by_the_untrusted_local_backend(
    owner_client: Client, project: Project, mailoutbox: list[Any], settings: Any
) -> None:
    """COMPUTE_BACKEND=local without AJUSTE_LOCAL_BACKEND_TRUSTED: the owner is the one active
    user; a second one would get a shell as the panel's OS user through a notebook."""
    settings.COMPUTE_BACKEND, settings.AJUSTE_LOCAL_BACKEND_TRUSTED = "local", False
    _invite(owner_client, project, "solo@example.com")
    link = _link(mailoutbox[0])
    _, answer = _sign_up(link)
    assert answer.status_code == 400
    assert b"AJUSTE_LOCAL_BACKEND_TRUSTED" in answer.content
    assert not User.objects.filter(username="newbie").exists()
    assert Invitation.objects.get().status == "pending"
