"""Who a single sign-on is: an identity (issuer, subject) signs in to the account it is linked
to, or to a new one; never to an existing account because the provider hands over its address
(issue 25: a sign-in returned the `root` superuser). An existing account takes an identity
only through its owner's own confirmed action: logged in, "Connect" on the settings page, the
provider's round trip, then a confirmation."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.accounts import oidc
from controlpanel.accounts.models import OidcIdentity, User
from controlpanel.audit.models import AuditEvent
from controlpanel.projects.models import Membership
from tests.fixtures.oidc import (  # noqa: F401
    configure_panel,
    connect_over_http,
    oidc_provider,
    sign_in_over_http,
)
from tests.fixtures.panel import PASSWORD, ProjectFactory, UserFactory, logged_in

SITE = "http://testserver"


@pytest.fixture
def sso(settings: Any, oidc_provider: Any, db: Any) -> Any:  # noqa: F811
    configure_panel(settings, oidc_provider, site_url=SITE, mapping="ml-leads=vision:manager")
    oidc.oidc_client_reset()
    return oidc_provider


def _me(client: Client) -> Any:
    answer = client.get("/api/v1/me/")
    return answer.json()["username"] if answer.status_code == 200 else None


def test_a_verified_address_does_not_sign_in_to_the_superuser_who_has_it(sso: Any) -> None:
    """The reproduction: root has root@corp.example; anyone whose provider account carries
    that address, `email_verified` included, used to be signed in as root."""
    root = UserFactory(username="root", email="root@corp.example", is_staff=True)
    root.is_superuser = True
    root.save()
    sso.user("mallory", email="root@corp.example", groups=["ml-leads"])
    panel = Client()
    answer = sign_in_over_http(panel, sso, "mallory")
    assert answer.status_code == 403, answer.content[:800]
    assert b"An account here already uses root@corp.example" in answer.content
    assert _me(panel) is None
    assert not OidcIdentity.objects.exists()
    assert User.objects.count() == 1 and not Membership.objects.exists()


def test_no_existing_account_is_taken_over_by_a_verified_address(sso: Any) -> None:
    """A plain account neither: the person is told how to connect it themself."""
    dee = UserFactory(username="dee.local", email="Dee@Corp.example")
    sso.user("dee", email="dee@corp.example")
    panel = Client()
    answer = sign_in_over_http(panel, sso, "dee")
    assert answer.status_code == 403
    assert b"log in to it and connect Test IdP from its Settings page" in answer.content
    assert _me(panel) is None and not OidcIdentity.objects.filter(user=dee).exists()


def test_an_unverified_address_links_nothing_even_with_oidc_trust_email(
    sso: Any, settings: Any
) -> None:
    """OIDC_TRUST_EMAIL=1 used to link this sign-in to dee.local; it is retired (start-up
    refuses it) and changes nothing here: a new account, without the address."""
    settings.OIDC_TRUST_EMAIL = True
    dee = UserFactory(username="dee.local", email="dee@corp.example")
    sso.user("dee", email="dee@corp.example", claims={"email_verified": False})
    panel = Client()
    assert sign_in_over_http(panel, sso, "dee").status_code == 302
    assert _me(panel) == "dee"
    assert User.objects.get(username="dee").email == ""
    assert not OidcIdentity.objects.filter(user=dee).exists()


def test_an_unverified_address_makes_an_account_without_it(sso: Any) -> None:
    """Nothing is linked, and the address the provider does not vouch for is not kept."""
    sso.user("ula", email="ula@corp.example", claims={"email_verified": False})
    panel = Client()
    assert sign_in_over_http(panel, sso, "ula").status_code == 302
    ula = User.objects.get(username="ula")
    assert ula.email == "" and _me(panel) == "ula"


def test_connect_from_the_settings_page_then_sign_in_with_it(sso: Any) -> None:
    dee = UserFactory(username="dee.local", email="dee@corp.example")
    sso.user("dee", email="dee@corp.example", groups=["ml-leads"])
    vision = ProjectFactory(slug="vision", name="Vision")
    client = logged_in(dee)
    page = client.get("/settings/")
    assert b'data-testid="sso-connect"' in page.content
    assert b"Connect my Test IdP identity" in page.content
    confirm = connect_over_http(client, sso, "dee")
    assert confirm.status_code == 200, confirm.content[:800]
    assert b"dee.local" in confirm.content and b"dee@corp.example" in confirm.content
    assert not OidcIdentity.objects.exists()  # nothing until the owner confirms
    done = client.post("/settings/sso/connect/", {"action": "connect"})
    assert done.status_code == 302 and done["Location"] == "/settings/"
    identity = OidcIdentity.objects.get()
    assert identity.user == dee and identity.issuer == sso.issuer
    event = AuditEvent.objects.get(action="sso.connect")
    assert event.actor == dee and event.target_id == str(dee.pk)
    # From now on the provider signs in to dee.local, with the group mapping applied.
    panel = Client()
    assert sign_in_over_http(panel, sso, "dee").status_code == 302
    assert _me(panel) == "dee.local"
    assert Membership.objects.get(user=dee, project=vision).role == "manager"
    assert b'data-testid="sso-connect"' not in client.get("/settings/").content


def test_a_connection_is_not_made_without_the_confirmation_of_its_session(sso: Any) -> None:
    """The round trip alone links nothing; another session (or anonymous) cannot confirm it;
    cancelling drops it."""
    dee = UserFactory(username="dee.local", email="dee@corp.example")
    sso.user("dee", email="dee@corp.example")
    client = logged_in(dee)
    connect_over_http(client, sso, "dee")
    assert logged_in(dee).post("/settings/sso/connect/", {"action": "connect"}).status_code == 409
    assert Client().post("/settings/sso/connect/", {"action": "connect"}).status_code == 302
    assert not OidcIdentity.objects.exists()
    client.post("/settings/sso/connect/", {"action": "cancel"})
    assert client.post("/settings/sso/connect/", {"action": "connect"}).status_code == 409
    assert not OidcIdentity.objects.exists()


def test_connect_starts_only_from_a_signed_in_session(sso: Any) -> None:
    start = Client().get("/oidc/login/?connect=1")
    assert start.status_code == 302 and start["Location"].startswith("/login/")


def test_an_identity_linked_to_another_account_is_not_connected_again(sso: Any) -> None:
    sso.user("ann", email="ann@corp.example")
    sign_in_over_http(Client(), sso, "ann")  # made the account `ann`
    other = UserFactory(username="other", email="other@corp.example")
    client = logged_in(other)
    answer = connect_over_http(client, sso, "ann")
    assert b"already connected to another account" in answer.content
    assert client.post("/settings/sso/connect/", {"action": "connect"}).status_code == 409
    assert OidcIdentity.objects.get().user.username == "ann"


def test_a_callback_for_a_connection_started_by_someone_else_signs_nobody_in(sso: Any) -> None:
    """The attacker starts a connection in his session and hands the provider's answer to a
    signed-in victim: the state is not the victim's, nothing is linked to the victim."""
    victim = UserFactory(username="victim", email="victim@corp.example")
    attacker = UserFactory(username="attacker", email="attacker@corp.example")
    sso.user("attacker-idp", email="attacker-idp@corp.example")
    attacker_client = logged_in(attacker)
    start = attacker_client.get("/oidc/login/?connect=1")
    answer = sso.browser_like("attacker-idp").get(start["Location"], follow_redirects=False)
    callback = answer.headers["location"].removeprefix(SITE)
    victim_client = logged_in(victim)
    refused = victim_client.get(callback)
    assert refused.status_code == 403
    assert victim_client.post("/settings/sso/connect/", {"action": "connect"}).status_code == 409
    assert not OidcIdentity.objects.exists()


def test_a_password_log_in_after_connect_still_works(sso: Any) -> None:
    dee = UserFactory(username="dee.local", email="dee@corp.example")
    sso.user("dee", email="dee@corp.example")
    client = logged_in(dee)
    connect_over_http(client, sso, "dee")
    client.post("/settings/sso/connect/", {"action": "connect"})
    again = Client().post("/login/", {"username": "dee.local", "password": PASSWORD})
    assert again.status_code == 302
