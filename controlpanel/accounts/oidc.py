"""Single sign-on with OpenID Connect (authorization code flow), through Authlib's Django client.

Authlib (https://authlib.org) is the relying party: it reads the provider's discovery document,
sends the user to the authorization endpoint with `state`, a `nonce` and a PKCE S256
challenge (kept in the session), checks `state` on the way back, exchanges the code with the
verifier, and verifies the ID token: its signature against the provider's JWKS (fetched again
once when a token names an unknown key), and its claims. We pin what it checks: the issuer
must be OIDC_ISSUER (the discovery document must say so too), the audience must include
OIDC_CLIENT_ID (with `azp` checked when there are several), `exp`/`iat` within a minute's
leeway, the nonce the one we sent, and only asymmetric signature algorithms (never `none` or
a shared-secret HMAC, whatever the discovery document lists).

Then the user: the account linked to (issuer, subject), else the one account with the
token's address when the provider vouches for it (`email_verified`, or OIDC_TRUST_EMAIL=1),
else a new account. OIDC_GROUP_MAPPING is applied at each sign-in (GroupGrant).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable
from typing import Any

from authlib.common.errors import AuthlibBaseError
from authlib.integrations.django_client import OAuth
from authlib.integrations.django_client.apps import DjangoOAuth2App
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from joserfc.errors import JoseError
from requests import RequestException

from controlpanel.accounts.models import GroupGrant, OidcIdentity
from controlpanel.accounts.oidc_settings import GroupRule
from controlpanel.projects.models import Membership, Project, Role

log = logging.getLogger(__name__)

BACKEND = "controlpanel.accounts.backends.OidcBackend"
# Only asymmetric signatures: an HMAC ID token is keyed with the client secret, and `none`
# is no signature at all.
SIGNING_ALGS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
LEEWAY_SECONDS = 60
METADATA_TTL_SECONDS = 3600
RANK: dict[str, int] = {Role.MEMBER: 0, Role.MANAGER: 1}


class OidcError(Exception):
    """A sign-in refused, with the reason the user is shown."""


def oidc_enabled() -> bool:
    return bool(settings.OIDC_ISSUER)


class _Client(DjangoOAuth2App):
    """Authlib's Django client, with the provider's discovery document held to our rules."""

    def load_server_metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = super().load_server_metadata()
        if metadata.get("issuer", "").rstrip("/") != settings.OIDC_ISSUER:
            raise OidcError(
                f"The provider's discovery document names the issuer {metadata.get('issuer')!r},"
                f" not OIDC_ISSUER {settings.OIDC_ISSUER!r}."
            )
        offered = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        metadata["id_token_signing_alg_values_supported"] = [
            alg for alg in offered if alg in SIGNING_ALGS
        ] or ["RS256"]
        return metadata


class _OAuth(OAuth):
    oauth2_client_cls = _Client


_clients: dict[tuple[Any, ...], tuple[float, Any]] = {}
_clients_lock = threading.Lock()


def _client() -> Any:
    """One client per configuration, remade hourly (the discovery document is read again)."""
    key = (
        settings.OIDC_DISCOVERY_URL,
        settings.OIDC_CLIENT_ID,
        settings.OIDC_CLIENT_SECRET,
        settings.OIDC_SCOPES,
        settings.OIDC_TIMEOUT_SECONDS,
    )
    now = time.monotonic()
    with _clients_lock:
        made = _clients.get(key)
        if made is not None and now - made[0] < METADATA_TTL_SECONDS:
            return made[1]
        client_kwargs: dict[str, Any] = {
            "scope": settings.OIDC_SCOPES,
            "code_challenge_method": "S256",
            "default_timeout": settings.OIDC_TIMEOUT_SECONDS,
        }
        if not settings.OIDC_CLIENT_SECRET:  # a public client: PKCE alone
            client_kwargs["token_endpoint_auth_method"] = "none"  # noqa: S105
        client = _OAuth().register(
            name="oidc",
            client_id=settings.OIDC_CLIENT_ID,
            client_secret=settings.OIDC_CLIENT_SECRET or None,
            server_metadata_url=settings.OIDC_DISCOVERY_URL,
            client_kwargs=client_kwargs,
        )
        _clients.clear()
        _clients[key] = (now, client)
        return client


def callback_url() -> str:
    """What to register at the provider as the redirect URI."""
    return settings.SITE_URL + reverse("oidc-callback")


_FAILURES = (AuthlibBaseError, JoseError, RequestException, ValueError, KeyError, TypeError)


def oidc_redirect(request: HttpRequest) -> HttpResponse:
    """The redirect to the provider's authorization endpoint (state, nonce and PKCE kept in
    the session)."""
    try:
        response: HttpResponse = _client().authorize_redirect(request, callback_url())
    except OidcError:
        raise
    except _FAILURES as exc:
        log.warning("oidc: cannot reach the provider: %s", exc)
        raise OidcError(f"The sign-in provider cannot be reached ({_short(exc)}).") from None
    return response


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 200 else text[:200] + "…"


def oidc_complete(request: HttpRequest) -> Any:
    """Check the provider's answer (state, code exchange with the PKCE verifier, the ID
    token's signature and claims) and return the user it signs in, made or updated."""
    client = _client()
    if request.GET.get("error"):
        said = request.GET.get("error_description") or request.GET["error"]
        raise OidcError(f"The provider refused the sign-in: {said[:200]}.")
    try:
        token = client.authorize_access_token(
            request,
            claims_options={
                "iss": {"essential": True, "values": [settings.OIDC_ISSUER]},
                "aud": {"essential": True, "values": [settings.OIDC_CLIENT_ID]},
                "sub": {"essential": True},
                "exp": {"essential": True},
            },
            leeway=LEEWAY_SECONDS,
        )
    except OidcError:
        raise
    except _FAILURES as exc:
        log.warning("oidc: sign-in refused: %r", exc)
        raise OidcError(f"The sign-in could not be verified ({_short(exc)}).") from None
    id_claims = token.get("userinfo")
    if not id_claims:  # no ID token, or no nonce in our session: not an OIDC answer we asked
        raise OidcError("The provider sent no ID token.")
    claims = dict(id_claims)
    claims.update(
        {k: v for k, v in _userinfo(client, token, claims["sub"]).items() if k not in claims}
    )
    return oidc_sign_in(issuer=settings.OIDC_ISSUER, claims=claims)


def _userinfo(client: Any, token: dict[str, Any], subject: str) -> dict[str, Any]:
    """The userinfo endpoint's claims (groups and e-mail are often only there); ignored when
    the endpoint is missing, fails, or answers for another subject."""
    endpoint = client.load_server_metadata().get("userinfo_endpoint")
    if not endpoint or not token.get("access_token"):
        return {}
    try:
        data = dict(client.userinfo(token=token))
    except _FAILURES as exc:
        log.warning("oidc: userinfo not read: %s", exc)
        return {}
    if data.get("sub") != subject:
        log.warning("oidc: userinfo answered for another subject; ignored")
        return {}
    return data


def _groups(claims: dict[str, Any]) -> list[str]:
    value = claims.get(settings.OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({str(g) for g in value if isinstance(g, str | int)})


def _trusted_email(claims: dict[str, Any]) -> str:
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email:
        return ""
    verified = claims.get("email_verified")
    if verified is True or (isinstance(verified, str) and verified.lower() == "true"):
        return email.strip()
    return email.strip() if settings.OIDC_TRUST_EMAIL else ""


_USERNAME_BAD = re.compile(r"[^\w.@+-]")


def _free_username(claims: dict[str, Any]) -> str:
    wanted = claims.get(settings.OIDC_USERNAME_CLAIM) or claims.get("email") or claims["sub"]
    base = _USERNAME_BAD.sub("-", str(wanted))[:140].strip("-") or "user"
    User = get_user_model()
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


@transaction.atomic
def oidc_sign_in(*, issuer: str, claims: dict[str, Any]) -> Any:
    """The user for verified `claims`: linked, linked now by a vouched-for address, or new;
    names and address refreshed; then the group mapping applied."""
    User = get_user_model()
    subject = str(claims["sub"])
    email = _trusted_email(claims)
    identity = (
        OidcIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    if identity is None:
        user = _link_or_create(User, issuer, subject, email, claims)
        identity = OidcIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    user = identity.user
    if not user.is_active:
        raise OidcError("This account is deactivated. Ask a site admin.")
    changed = []
    for field, claim in (("first_name", "given_name"), ("last_name", "family_name")):
        value = claims.get(claim)
        if isinstance(value, str) and value and getattr(user, field) != value[:150]:
            setattr(user, field, value[:150])
            changed.append(field)
    if email and user.email != email:
        clash = User.objects.filter(email__iexact=email).exclude(pk=user.pk).exists()
        if not clash:
            user.email = email
            changed.append("email")
    if changed:
        user.save(update_fields=changed)
    groups = _groups(claims)
    identity.groups = groups
    identity.last_sign_in_at = timezone.now()
    identity.save(update_fields=["groups", "last_sign_in_at"])
    group_mapping_apply(user=user, groups=groups)
    return user


def _link_or_create(
    User: Any, issuer: str, subject: str, email: str, claims: dict[str, Any]
) -> Any:
    address = claims.get("email") if isinstance(claims.get("email"), str) else ""
    if address:
        accounts = list(User.objects.filter(email__iexact=address)[:2])
        if accounts and not email:
            raise OidcError(
                f"An account here already uses {address}, and the provider does not say the "
                "address is verified: ask a site admin."
            )
        if len(accounts) > 1:
            raise OidcError(f"Several accounts here use {address}: ask a site admin.")
        if accounts:
            account = accounts[0]
            if OidcIdentity.objects.filter(user=account, issuer=issuer).exists():
                raise OidcError(
                    f"The account with {address} is linked to another identity at this "
                    "provider: ask a site admin."
                )
            log.info("oidc: %s at %s linked to %s by address", subject, issuer, account)
            return account
    user = User(username=_free_username(claims), email=email)
    user.set_unusable_password()
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        raise OidcError("The account could not be created; try again.") from None
    log.info("oidc: %s at %s made the account %s", subject, issuer, user)
    return user


def _wanted(rules: Iterable[GroupRule], groups: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Project slug → (the highest role the groups give, the groups that give it)."""
    wanted: dict[str, tuple[str, list[str]]] = {}
    held = set(groups)
    for rule in rules:
        if rule.group not in held:
            continue
        role, why = wanted.get(rule.project, (Role.MEMBER, []))
        if not why or RANK[rule.role] > RANK[role]:
            role = rule.role
        wanted[rule.project] = (role, sorted({*why, rule.group}))
    return wanted


@transaction.atomic
def group_mapping_apply(*, user: Any, groups: list[str]) -> None:
    """Make the memberships OIDC_GROUP_MAPPING gives match `groups`: added (or set to the
    mapped role) where a group grants one, removed where none does any more. A membership
    added by hand (no GroupGrant) is never changed or removed."""
    wanted = _wanted(settings.OIDC_GROUP_MAPPING, groups)
    projects = {p.slug: p for p in Project.objects.filter(slug__in=wanted)}
    for slug in set(wanted) - set(projects):
        log.warning("OIDC_GROUP_MAPPING names the project %r, which does not exist", slug)
    grants = {g.project_id: g for g in GroupGrant.objects.select_for_update().filter(user=user)}
    now = timezone.now()
    for slug, project in projects.items():
        role, why = wanted[slug]
        grant = grants.pop(project.pk, None)
        membership = Membership.objects.filter(project=project, user=user).first()
        if membership is not None and grant is None:
            continue  # added by hand: left alone
        if membership is None:
            Membership.objects.create(project=project, user=user, role=role)
        elif membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
        GroupGrant.objects.update_or_create(
            user=user, project=project, defaults={"role": role, "groups": why, "updated_at": now}
        )
    for project_id, grant in grants.items():  # no group grants it any more
        Membership.objects.filter(project_id=project_id, user=user).delete()
        grant.delete()
