"""Single sign-on against a real OpenID Connect provider (django-oauth-toolkit in a process of
its own): first sign-in makes the account, group mapping adds and takes away memberships,
and an ID token that is forged, expired, for another audience or from another issuer is
refused, as is a callback whose state is not this session's."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.accounts.models import GroupGrant, OidcIdentity, User
from controlpanel.projects.models import Membership, Role
from tests.fixtures.oidc import configure_panel, oidc_provider, sign_in_over_http  # noqa: F401
from tests.fixtures.panel import ProjectFactory, UserFactory, add_member

SITE = "http://testserver"
MAPPING = "ml-team=vision:member,ml-leads=vision:manager,nlp=language:member"


@pytest.fixture
def sso(settings: Any, oidc_provider: Any, db: Any) -> Any:  # noqa: F811
    configure_panel(settings, oidc_provider, site_url=SITE, mapping=MAPPING)
    return oidc_provider


def _session_user(client: Client) -> Any:
    return client.get("/api/v1/me/").json()


def test_first_sign_in_makes_the_account_with_the_mapped_projects(sso: Any) -> None:
    vision = ProjectFactory(slug="vision", name="Vision")
    sso.user("ada", email="ada@corp.example", groups=["ml-team"], first_name="Ada")
    panel = Client()
    answer = sign_in_over_http(panel, sso, "ada")
    assert answer.status_code == 302, answer.content[:800]
    user = User.objects.get(username="ada")
    assert user.email == "ada@corp.example" and user.first_name == "Ada"
    assert not user.has_usable_password()
    identity = OidcIdentity.objects.get(user=user)
    assert identity.issuer == sso.issuer and identity.groups == ["ml-team"]
    assert Membership.objects.get(user=user, project=vision).role == Role.MEMBER
    assert _session_user(panel)["username"] == "ada"
    # The second sign-in finds the same account.
    sign_in_over_http(Client(), sso, "ada")
    assert User.objects.filter(email="ada@corp.example").count() == 1


def test_group_mapping_follows_the_groups_at_each_sign_in(sso: Any) -> None:
    vision = ProjectFactory(slug="vision", name="Vision")
    language = ProjectFactory(slug="language", name="Language")
    sso.user("bo", email="bo@corp.example", groups=["ml-team", "nlp"])
    sign_in_over_http(Client(), sso, "bo")
    bo = User.objects.get(username="bo")
    assert dict(Membership.objects.filter(user=bo).values_list("project__slug", "role")) == {
        "vision": "member",
        "language": "member",
    }
    # Promoted at the provider: manager of vision (the higher role wins); nlp gone.
    sso.user("bo", email="bo@corp.example", groups=["ml-team", "ml-leads"])
    sign_in_over_http(Client(), sso, "bo")
    assert dict(Membership.objects.filter(user=bo).values_list("project__slug", "role")) == {
        "vision": "manager"
    }
    assert GroupGrant.objects.get(user=bo, project=vision).groups == ["ml-leads", "ml-team"]
    assert not GroupGrant.objects.filter(user=bo, project=language).exists()
    # Out of every mapped group: out of the project.
    sso.user("bo", email="bo@corp.example", groups=["somewhere-else"])
    sign_in_over_http(Client(), sso, "bo")
    assert not Membership.objects.filter(user=bo).exists()
    assert OidcIdentity.objects.get(user=bo).groups == ["somewhere-else"]


def test_group_mapping_leaves_memberships_added_by_hand(sso: Any) -> None:
    vision = ProjectFactory(slug="vision", name="Vision")
    other = ProjectFactory(slug="other", name="Other")
    cy = UserFactory(username="cy", email="cy@corp.example")
    add_member(vision, cy, Role.MANAGER)  # by hand, before any sign-in
    add_member(other, cy, Role.MEMBER)
    sso.user("cy", email="cy@corp.example", groups=["ml-team"])  # would say member
    sign_in_over_http(Client(), sso, "cy")
    assert Membership.objects.get(user=cy, project=vision).role == Role.MANAGER
    sso.user("cy", email="cy@corp.example", groups=[])
    sign_in_over_http(Client(), sso, "cy")
    assert set(Membership.objects.filter(user=cy).values_list("project__slug", flat=True)) == {
        "vision",
        "other",
    }
    assert not GroupGrant.objects.filter(user=cy).exists()


def test_an_account_with_the_verified_address_is_linked_not_duplicated(sso: Any) -> None:
    dee = UserFactory(username="dee.local", email="Dee@Corp.example")
    sso.user("dee", email="dee@corp.example")
    sign_in_over_http(Client(), sso, "dee")
    assert OidcIdentity.objects.get().user == dee
    assert User.objects.count() == 1


def test_an_unverified_address_of_an_existing_account_is_refused(sso: Any) -> None:
    UserFactory(username="eve.local", email="eve@corp.example")
    sso.user("eve", email="eve@corp.example", claims={"email_verified": False})
    panel = Client()
    answer = sign_in_over_http(panel, sso, "eve")
    assert answer.status_code == 403
    assert b"does not say the address is verified" in answer.content
    assert not OidcIdentity.objects.exists()
    assert panel.get("/api/v1/me/").status_code == 401


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("forged", b"bad_signature"),
        ("expired", b"The token is expired"),
        ("wrong-audience", b"Invalid claim: &#x27;aud&#x27;"),
        ("wrong-issuer", b"Invalid claim: &#x27;iss&#x27;"),
    ],
)
def test_a_bad_id_token_is_refused(sso: Any, mode: str, why: bytes) -> None:
    ProjectFactory(slug="vision", name="Vision")
    sso.user("mallory", email="mallory@corp.example", groups=["ml-leads"])
    sso.mode(mode)
    panel = Client()
    answer = sign_in_over_http(panel, sso, "mallory")
    assert answer.status_code == 403, answer.content[:500]
    assert b"could not be verified" in answer.content and why in answer.content
    assert not User.objects.filter(username="mallory").exists()
    assert not Membership.objects.exists()
    assert panel.get("/api/v1/me/").status_code == 401
    # The same provider behaving again signs the same person in: the refusal was the token's.
    sso.mode("normal")
    assert sign_in_over_http(Client(), sso, "mallory").status_code == 302


def test_a_callback_from_another_session_is_refused(sso: Any) -> None:
    """Login CSRF: a code and state made for the attacker's session do not sign anyone in."""
    sso.user("attacker", email="attacker@corp.example")
    attacker, victim = Client(), Client()
    start = attacker.get("/oidc/login/")
    answer = sso.browser_like("attacker").get(start["Location"], follow_redirects=False)
    callback = answer.headers["location"].removeprefix(SITE)
    refused = victim.get(callback)
    assert refused.status_code == 403
    assert victim.get("/api/v1/me/").status_code == 401
    assert not User.objects.filter(username="attacker").exists()


def test_the_request_carries_state_nonce_and_a_pkce_challenge(sso: Any) -> None:
    start = Client().get("/oidc/login/")
    location = start["Location"]
    assert location.startswith(f"{sso.issuer}/authorize/")
    for part in ("state=", "nonce=", "code_challenge=", "code_challenge_method=S256"):
        assert part in location


def test_a_deactivated_account_cannot_sign_in(sso: Any) -> None:
    sso.user("fay", email="fay@corp.example")
    sign_in_over_http(Client(), sso, "fay")
    User.objects.filter(username="fay").update(is_active=False)
    answer = sign_in_over_http(Client(), sso, "fay")
    assert answer.status_code == 403 and b"deactivated" in answer.content


def test_the_log_in_page_shows_the_provider_and_oidc_only_turns_passwords_off(
    sso: Any, settings: Any
) -> None:
    UserFactory(username="gus", is_staff=True)
    page = Client().get("/login/")
    assert b"Sign in with Test IdP" in page.content and b'name="password"' in page.content
    before = Client()
    creds = {"username": "gus", "password": "correct horse battery staple"}
    assert before.post("/login/", creds).status_code == 302
    assert before.get("/api/v1/me/").status_code == 200
    settings.OIDC_ONLY = True
    # The session a password opened ends; the admin's log-in form takes no password either.
    assert before.get("/api/v1/me/").status_code == 401
    admin_login = Client().post("/admin/login/", creds)
    assert admin_login.status_code == 200 and "_auth_user_id" not in admin_login.client.session
    page = Client().get("/login/")
    assert b"Sign in with Test IdP" in page.content and b'name="password"' not in page.content
    refused = Client().post(
        "/login/", {"username": "gus", "password": "correct horse battery staple"}
    )
    assert refused.status_code == 403


def test_sso_is_off_without_an_issuer(db: Any) -> None:
    assert Client().get("/oidc/login/").status_code == 404
    assert Client().get("/oidc/callback/?code=x&state=y").status_code == 404
    assert b"Sign in with" not in Client().get("/login/").content


def test_an_unreachable_provider_is_said(settings: Any, db: Any) -> None:
    from tests.fixtures.oidc import free_port

    settings.OIDC_ISSUER = f"http://127.0.0.1:{free_port()}/o"
    settings.OIDC_DISCOVERY_URL = f"{settings.OIDC_ISSUER}/.well-known/openid-configuration"
    settings.OIDC_CLIENT_ID = "x"
    answer = Client().get("/oidc/login/")
    assert answer.status_code == 502
    assert b"cannot be reached" in answer.content


def test_api_tokens_of_sso_users_work_until_deactivation(sso: Any) -> None:
    from controlpanel.accounts.people import user_deactivate
    from controlpanel.accounts.services import token_create

    sso.user("hal", email="hal@corp.example")
    sign_in_over_http(Client(), sso, "hal")
    hal = User.objects.get(username="hal")
    _, raw = token_create(user=hal, name="cli")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/me/").json()["username"] == "hal"
    admin = UserFactory(username="root", is_staff=True)
    user_deactivate(by=admin, user=hal)
    assert api.get("/api/v1/me/").status_code == 401
