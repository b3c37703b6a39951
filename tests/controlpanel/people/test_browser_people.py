"""In Chromium: the full authorization-code flow against the real provider (its own log-in
page), and an invitation from the Members page to the new colleague's first page."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from controlpanel.accounts.models import OidcIdentity, User
from controlpanel.projects.models import Membership, Project, Role
from tests.fixtures.browser import browser_login, console_errors
from tests.fixtures.oidc import IDP_PASSWORD, configure_panel, oidc_provider  # noqa: F401
from tests.fixtures.panel import PASSWORD


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_sso_sign_in_in_chromium_with_group_mapping(
    page: Any,
    live_server: Any,
    project: Project,
    oidc_provider: Any,  # noqa: F811
    settings: Any,
) -> None:
    from tests.fixtures.panel import UserFactory, add_member

    base = live_server.url
    add_member(project, UserFactory(username="boss"), Role.MANAGER)  # ines is not the last one
    configure_panel(settings, oidc_provider, site_url=base, mapping="ml-leads=alpha:manager")
    oidc_provider.user(
        "ines", email="ines@corp.example", groups=["ml-leads"], first_name="Inès", last_name="Roy"
    )
    page.goto(f"{base}/login/")
    page.click("[data-testid=sso-login]")
    page.wait_for_url(re.compile(re.escape(oidc_provider.url) + "/login/"))
    page.fill("#idp-username", "ines")
    page.fill("#idp-password", IDP_PASSWORD)
    page.click("#idp-submit")
    page.wait_for_url(f"{base}/p/alpha/")
    expect(page.locator("h1")).to_contain_text("Alpha")
    expect(page.locator("[data-testid=logout]")).to_contain_text("ines")
    ines = User.objects.get(username="ines")
    assert (ines.first_name, ines.email) == ("Inès", "ines@corp.example")
    assert Membership.objects.get(user=ines, project=project).role == Role.MANAGER
    assert OidcIdentity.objects.get(user=ines).groups == ["ml-leads"]
    page.goto(f"{base}/settings/")
    expect(page.locator("[data-testid=my-projects]")).to_contain_text("via ml-leads")

    # Out of the group at the provider: the next sign-in takes the project away.
    oidc_provider.user("ines", email="ines@corp.example", groups=[])
    page.click("[data-testid=logout]")
    page.wait_for_url(f"{base}/login/")
    page.click("[data-testid=sso-login]")
    page.fill("#idp-username", "ines")  # the provider's session ended with the (re)set password
    page.fill("#idp-password", IDP_PASSWORD)
    page.click("#idp-submit")
    page.wait_for_url(f"{base}/")
    expect(page.locator("body")).not_to_contain_text("Alpha")
    assert not Membership.objects.filter(user=ines).exists()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_invitation_from_the_members_page_in_chromium(
    page: Any, live_server: Any, owner: User, project: Project, settings: Any, mailoutbox: Any
) -> None:
    base = live_server.url
    settings.SITE_URL = base
    browser_login(page, base, "owner", PASSWORD)
    page.wait_for_url(f"{base}/p/alpha/")
    page.goto(f"{base}/p/alpha/members/")
    page.fill("#id_email", "jo@example.com")
    page.select_option("#id_role", "member")
    page.click("[data-testid=invitations] button.primary")
    expect(page.locator(".messages")).to_contain_text("Invitation sent to jo@example.com")
    expect(page.locator("[data-testid=pending-invitations]")).to_contain_text("jo@example.com")
    (message,) = mailoutbox
    link = re.search(r"http://\S+/invite/\S+/", message.body).group(0)
    assert link.startswith(base)
    page.click("[data-testid=logout]")

    page.goto(link)
    expect(page.locator("[data-testid=invitation] h1")).to_have_text("Join Alpha")
    page.fill("#id_username", "jo")
    page.fill("#id_password1", "a long and unusual passphrase 42")
    page.fill("#id_password2", "a long and unusual passphrase 42")
    page.click("[data-testid=sign-up] button[type=submit]")
    page.wait_for_url(f"{base}/p/alpha/")
    expect(page.locator(".messages")).to_contain_text("Welcome to Alpha")
    expect(page.locator("[data-testid=logout]")).to_contain_text("jo")
    assert Membership.objects.get(user__username="jo", project=project).role == Role.MEMBER
    page.goto(link)
    expect(page.locator("[data-testid=invitation-refusal]")).to_contain_text("already used")
    errors = console_errors(page)
    assert len(errors) == 1 and "410 (Gone)" in errors[0]  # the page's own status, expected
    errors.clear()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_connect_an_existing_account_in_chromium(
    page: Any,
    live_server: Any,
    project: Project,
    oidc_provider: Any,  # noqa: F811
    settings: Any,
) -> None:
    """An account with a password connects its identity from the settings page: the link to the
    provider, its log-in, the confirmation page (what is connected to what), then SSO signs in
    to that same account. The page's CSP lets every step through (no console error)."""
    from tests.fixtures.panel import UserFactory

    base = live_server.url
    configure_panel(settings, oidc_provider, site_url=base)
    UserFactory(username="dee.local", email="dee@corp.example")
    oidc_provider.user("dee", email="dee@corp.example")
    browser_login(page, base, "dee.local", PASSWORD)
    page.goto(f"{base}/settings/")
    page.click("[data-testid=sso-connect]")
    page.wait_for_url(re.compile(re.escape(oidc_provider.url) + "/login/"))
    page.fill("#idp-username", "dee")
    page.fill("#idp-password", IDP_PASSWORD)
    page.click("#idp-submit")
    page.wait_for_url(f"{base}/settings/sso/connect/")
    expect(page.locator("[data-testid=sso-identity]")).to_have_text("dee@corp.example")
    assert not OidcIdentity.objects.exists()
    page.click("[data-testid=sso-connect-yes]")
    page.wait_for_url(f"{base}/settings/")
    expect(page.locator(".messages")).to_contain_text("Connected")
    expect(page.locator("[data-testid=sso-connect]")).to_have_count(0)
    assert OidcIdentity.objects.get().user.username == "dee.local"
    page.click("[data-testid=logout]")
    page.wait_for_url(f"{base}/login/")
    page.click("[data-testid=sso-login]")
    page.wait_for_url(f"{base}/")  # still signed in at the provider
    expect(page.locator("[data-testid=logout]")).to_contain_text("dee.local")
