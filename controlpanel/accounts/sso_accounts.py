"""What a verified OpenID Connect sign-in means for accounts.

An identity is (issuer, subject), and only that decides whose account it opens:
- linked: it signs in to its account;
- not linked: a new account is made. It is never linked to an existing account because the
  provider hands over that account's address: an address at the provider is whatever its
  admins or users typed, and `email_verified` is the provider's word (issue 25: one sign-in
  returned the `root` superuser). When the provider's verified address is already an
  account's here, the sign-in is refused with the way to connect that account;
- connected: a signed-in account takes an identity by its owner's own action: "Connect" on
  the settings page (the session remembers who asked), the provider's round trip, then the
  confirmation page's POST. The identity waits in that session only, for PENDING_SECONDS.

An address is written to the account only when the provider says `email_verified` is true and
no other account has it (OIDC_TRUST_EMAIL is retired): invitations match accounts by address.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.base import SessionBase
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlpanel import audit
from controlpanel.accounts.local_guard import refuse_another_active_user
from controlpanel.accounts.models import OidcIdentity
from controlpanel.accounts.oidc import OidcError
from controlpanel.accounts.sso_groups import group_mapping_apply, groups_of

log = logging.getLogger(__name__)

CONNECT_KEY = "oidc_connect"  # the user who asked to connect, set when the round trip starts
PENDING_KEY = "oidc_pending_link"  # the verified identity waiting for its confirmation
PENDING_SECONDS = 600
_USERNAME_BAD = re.compile(r"[^\w.@+-]")


def verified_email(claims: dict[str, Any]) -> str:
    """The token's address when the provider says it is verified, else ""."""
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email:
        return ""
    verified = claims.get("email_verified")
    if verified is True or (isinstance(verified, str) and verified.lower() == "true"):
        return email.strip()
    return ""


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
    """The account of verified `claims`: linked, or new; names and a verified address
    refreshed; then the group mapping applied."""
    subject = str(claims["sub"])
    identity = (
        OidcIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    if identity is None:
        user = _new_account(issuer, subject, claims)
        identity = OidcIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    user = identity.user
    if not user.is_active:
        raise OidcError("This account is deactivated. Ask a site admin.")
    _refresh(user, claims)
    groups = groups_of(claims)
    identity.groups = groups
    identity.last_sign_in_at = timezone.now()
    identity.save(update_fields=["groups", "last_sign_in_at"])
    group_mapping_apply(user=user, groups=groups)
    return user


def _new_account(issuer: str, subject: str, claims: dict[str, Any]) -> Any:
    User = get_user_model()
    email = verified_email(claims)
    if email and User.objects.filter(email__iexact=email).exists():
        raise OidcError(_clash(email))
    try:
        refuse_another_active_user()
    except ValidationError as exc:
        raise OidcError(" ".join(exc.messages)) from None
    user = User(username=_free_username(claims), email=email)
    user.set_unusable_password()
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        raise OidcError("The account could not be created; try again.") from None
    audit.record(
        "user.create", actor=user, target=user, username=user.username, email=email, via="sso"
    )
    log.info("oidc: %s at %s made the account %s", subject, issuer, user)
    return user


def _clash(email: str) -> str:
    provider = settings.OIDC_PROVIDER_NAME
    if settings.OIDC_ONLY:
        return (
            f"An account here already uses {email}, and passwords are off: ask a site admin. "
            f"A first sign-in with {provider} is never joined to an existing account by address."
        )
    return (
        f"An account here already uses {email}. If it is yours, log in to it and connect "
        f"{provider} from its Settings page; if not, ask a site admin."
    )


def _refresh(user: Any, claims: dict[str, Any]) -> None:
    """Names from the provider; its address only when verified and no other account's."""
    changed = []
    for field, claim in (("first_name", "given_name"), ("last_name", "family_name")):
        value = claims.get(claim)
        if isinstance(value, str) and value and getattr(user, field) != value[:150]:
            setattr(user, field, value[:150])
            changed.append(field)
    email, was = verified_email(claims), user.email
    taken = type(user).objects.filter(email__iexact=email).exclude(pk=user.pk)
    if email and was != email and not taken.exists():
        user.email = email
        changed.append("email")
        audit.record("user.email", actor=user, target=user, email=email, was=was, via="sso")
    if changed:
        user.save(update_fields=changed)


def _label(claims: dict[str, Any]) -> str:
    for claim in ("email", "preferred_username", "name"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            return value.strip()[:200]
    return str(claims["sub"])[:200]


def connect_pending_set(
    *, session: SessionBase, user: Any, issuer: str, claims: dict[str, Any]
) -> None:
    """Keep the verified identity in `user`'s session until they confirm (or refuse now,
    with the reason, when it cannot be theirs)."""
    subject = str(claims["sub"])
    owner = OidcIdentity.objects.filter(issuer=issuer, subject=subject).first()
    if owner is not None and owner.user_id == user.pk:
        raise OidcError(f"Your account is already connected to this {_provider()} identity.")
    if owner is not None:
        raise OidcError(
            f"This {_provider()} identity is already connected to another account here."
        )
    _one_identity_per_issuer(user, issuer)
    session[PENDING_KEY] = {
        "user": user.pk,
        "issuer": issuer,
        "subject": subject,
        "label": _label(claims),
        "at": time.time(),
    }


def _provider() -> str:
    return str(settings.OIDC_PROVIDER_NAME)


def _one_identity_per_issuer(user: Any, issuer: str) -> None:
    if OidcIdentity.objects.filter(user=user, issuer=issuer).exists():
        raise OidcError(
            f"Your account is already connected to another {_provider()} identity: ask a "
            "site admin to remove it first."
        )


def connect_pending(*, session: SessionBase, user: Any) -> dict[str, Any] | None:
    """The identity waiting for `user`'s confirmation in this session, if still fresh."""
    pending = session.get(PENDING_KEY)
    if not isinstance(pending, dict) or pending.get("user") != user.pk:
        return None
    if time.time() - float(pending.get("at", 0)) > PENDING_SECONDS:
        session.pop(PENDING_KEY, None)
        return None
    return pending


def connect_cancel(*, session: SessionBase) -> None:
    session.pop(PENDING_KEY, None)


@transaction.atomic
def identity_connect(*, session: SessionBase, user: Any) -> OidcIdentity:
    """The owner confirmed: the identity waiting in their session is theirs from now on."""
    pending = connect_pending(session=session, user=user)
    if pending is None or not user.is_active:
        raise OidcError("Nothing waits to be connected: start again from your Settings page.")
    session.pop(PENDING_KEY, None)
    _one_identity_per_issuer(user, pending["issuer"])
    try:
        with transaction.atomic():
            identity = OidcIdentity.objects.create(
                user=user, issuer=pending["issuer"], subject=pending["subject"]
            )
    except IntegrityError:
        raise OidcError(
            f"This {_provider()} identity is already connected to another account here."
        ) from None
    audit.record(
        "sso.connect",
        actor=user,
        target=user,
        issuer=pending["issuer"],
        subject=pending["subject"],
        identity=pending["label"],
    )
    log.info("oidc: %s at %s connected to %s", pending["subject"], pending["issuer"], user)
    return identity
