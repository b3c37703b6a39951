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

The ID token's header is checked first, by us: a token signed with an HMAC (keyed with the
client secret, which this panel holds too) or with `none` is refused with its reason before
Authlib sees it; Authlib's verifier is only ever offered the asymmetric algorithms as well.

What the verified claims mean for accounts (linked by issuer and subject only, never by
address) is sso_accounts.py; OIDC_GROUP_MAPPING is sso_groups.py.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
from typing import Any

from authlib.common.errors import AuthlibBaseError
from authlib.integrations.django_client import OAuth
from authlib.integrations.django_client.apps import DjangoOAuth2App
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from joserfc.errors import JoseError
from requests import RequestException

log = logging.getLogger(__name__)

BACKEND = "controlpanel.accounts.backends.OidcBackend"
# Only asymmetric signatures: an HMAC ID token is keyed with the client secret, and `none`
# is no signature at all.
SIGNING_ALGS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
LEEWAY_SECONDS = 60
METADATA_TTL_SECONDS = 3600


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

    def parse_id_token(self, token: dict[str, Any], nonce: str, **kwargs: Any) -> Any:
        if "id_token" in token:
            check_id_token_algorithm(token["id_token"])
        return super().parse_id_token(token, nonce, **kwargs)


def check_id_token_algorithm(id_token: Any) -> None:
    """Refuse, with the reason, an ID token that is not signed with an asymmetric key: its
    header is read (not trusted: the signature is verified afterwards, against the JWKS)."""
    try:
        head = str(id_token).split(".", 1)[0]
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
        alg = header.get("alg")
    except (ValueError, binascii.Error, AttributeError):
        raise OidcError("The provider sent an ID token that is not a JWT.") from None
    if alg not in SIGNING_ALGS:
        raise OidcError(
            f"The ID token is signed with {str(alg)[:20]}; this panel accepts only the "
            f"provider's key pair ({', '.join(SIGNING_ALGS[:2])}, ...). Make the provider sign "
            "this client's ID tokens with RS256."
        )


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


def oidc_client_reset() -> None:
    """Forget the client: the discovery document and the keys are read again at the next use
    (after the provider's configuration changed; tests that bend the provider)."""
    with _clients_lock:
        _clients.clear()


def provider_metadata() -> dict[str, Any]:
    """The provider's discovery document, as the checks above left it."""
    metadata: dict[str, Any] = _client().load_server_metadata()
    return metadata


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


def oidc_verify(request: HttpRequest) -> dict[str, Any]:
    """Check the provider's answer (state, code exchange with the PKCE verifier, the ID
    token's algorithm, signature and claims) and return its claims, the userinfo endpoint's
    added where the ID token has none of its own."""
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
    return claims


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
