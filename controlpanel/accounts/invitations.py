"""Invitations: a project's manager asks someone to join by e-mail address, with a role.

The invitee gets a one-time link (`/invite/<token>/`; only its SHA-256 is stored) that works
for INVITATION_DAYS, until it is used or revoked. Opening it, they set a password (a new
account with the invited address) or sign in (with single sign-on, or the password of an
account that has this address), confirm, and land in the project.

Nobody is added by address alone, not even an existing account: the address an account has
can come from a provider that lets people type it (issue 25: a member re-pointed hers to a
future hire's and became manager when the manager invited that address). The link goes to
the mailbox; whoever opens it accepts, signed in as an account with the invited address, by
confirming. Inviting says nothing about which account, if any, has the address.
"""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from controlpanel import audit
from controlpanel.accounts.local_guard import refuse_another_active_user
from controlpanel.accounts.models import Invitation, hash_token
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Membership, Role

log = logging.getLogger(__name__)
INVITATION_PREFIX = "inv_"
RANK: dict[str, int] = {Role.MEMBER: 0, Role.MANAGER: 1}


def same_address(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def invitation_url(raw: str) -> str:
    return settings.SITE_URL + reverse("invitation-accept", kwargs={"token": raw})


def _clean_email(email: Any) -> str:
    email = email.strip() if isinstance(email, str) else ""
    if not email:
        raise ValidationError({"email": "Give the e-mail address to invite."})
    try:
        validate_email(email)
    except ValidationError:
        raise ValidationError({"email": f"“{email}” is not a valid e-mail address."}) from None
    return email


def _clean_role(role: Any) -> str:
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}; use member or manager."})
    return str(role)


@transaction.atomic
def invitation_create(*, access: ProjectAccess, by: Any, email: str, role: str) -> Invitation:
    """Invite `email` to the project with `role` (managers of the project and site admins):
    an invitation is stored and its link e-mailed, whether or not an account has the address
    (a pending invitation to the same address is replaced: its link stops working). A mail
    server that refuses the message raises ValidationError and nothing is stored."""
    if not access.can_manage:
        raise PermissionDenied("Only the project's managers can invite people.")
    email, role = _clean_email(email), _clean_role(role)
    project = access.project
    now = timezone.now()
    Invitation.objects.filter(
        project=project, email__iexact=email, accepted_at=None, revoked_at=None
    ).update(revoked_at=now)
    raw = INVITATION_PREFIX + secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        project=project,
        email=email,
        role=role,
        digest=hash_token(raw),
        invited_by=by,
        expires_at=now + timedelta(days=settings.INVITATION_DAYS),
    )
    audit.record(
        "invitation.create", actor=by, project=project, target=invitation, email=email, role=role
    )
    mail_now(
        email,
        f"[Ajuste] {_name(by)} invites you to {project.name}",
        f"{_name(by)} invites you to join the project {project.name} on Ajuste as {role}.\n\n"
        f"Open this link to accept (it works once, until "
        f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC):\n\n{invitation_url(raw)}\n",
    )
    return invitation


def _name(user: Any) -> str:
    return (user.get_full_name() or user.username) if user is not None else "Someone"


def mail_now(to: str, subject: str, body: str) -> None:
    """Sent now, through Django's mail (the console backend prints it on `make run`); a
    refusal rolls the caller's transaction back with the reason."""
    try:
        send_mail(subject, body, None, [to], fail_silently=False)
    except (OSError, ValueError) as exc:  # smtplib's errors are OSErrors
        log.warning("mail to %s not sent: %s", to, exc)
        raise ValidationError(
            {"email": f"The e-mail to {to} could not be sent ({exc}); nothing was saved."}
        ) from None


@transaction.atomic
def invitation_revoke(*, access: ProjectAccess, invitation: Invitation) -> None:
    """The link stops working at once (managers of the invitation's project only)."""
    if not access.can_manage or invitation.project_id != access.project.pk:
        raise PermissionDenied("Only the project's managers can revoke its invitations.")
    done = Invitation.objects.filter(pk=invitation.pk, accepted_at=None, revoked_at=None).update(
        revoked_at=timezone.now()
    )
    if not done:
        raise ValidationError(
            f"The invitation to {invitation.email} is already {_state(invitation)}."
        )
    audit.record(
        "invitation.revoke",
        actor=None,
        project=access.project,
        target=invitation,
        email=invitation.email,
    )


def _state(invitation: Invitation) -> str:
    invitation.refresh_from_db()
    return invitation.status


def invitation_find(*, raw: str) -> Invitation | None:
    """The invitation whose link carries `raw` (whatever its state), or None."""
    if not isinstance(raw, str) or not raw.startswith(INVITATION_PREFIX) or len(raw) > 100:
        return None
    return (
        Invitation.objects.select_related("project", "invited_by")
        .filter(digest=hash_token(raw))
        .first()
    )


def invitation_refusal(invitation: Invitation | None) -> str:
    """Why this link cannot be used (empty when it can)."""
    if invitation is None:
        return "This invitation link is not valid. Ask the person who invited you for a new one."
    status = invitation.status
    if status == "accepted":
        return "This invitation was already used: it works once. Log in to open the project."
    if status == "revoked":
        return "This invitation was withdrawn. Ask the project's managers for a new one."
    if status == "expired":
        return (
            f"This invitation expired on {invitation.expires_at:%Y-%m-%d %H:%M} UTC. "
            "Ask the project's managers for a new one."
        )
    return ""


@transaction.atomic
def invitation_accept(*, raw: str, user: Any) -> Membership:
    """`user` (signed in) joins the project with the invitation's role, once. The account's
    address must be the invited one (case aside). An existing membership keeps the higher of
    its role and the invited one."""
    invitation = invitation_find(raw=raw)
    if invitation is not None:
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
    refusal = invitation_refusal(invitation)
    if refusal:
        raise ValidationError(refusal)
    assert invitation is not None
    if not user.is_active:
        raise PermissionDenied("This account is deactivated.")
    if not same_address(user.email or "", invitation.email):
        raise PermissionDenied(
            f"This invitation was sent to {invitation.email}, and you are signed in as "
            f"{user.username} ({user.email or 'no e-mail address'}). Log out, then open the "
            "link again and sign in with the invited address."
        )
    membership, made = Membership.objects.select_for_update().get_or_create(
        project=invitation.project, user=user, defaults={"role": invitation.role}
    )
    if not made and RANK.get(invitation.role, 0) > RANK.get(membership.role, 0):
        membership.role = invitation.role
        membership.save(update_fields=["role"])
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    audit.record(
        "invitation.accept",
        actor=user,
        project=invitation.project,
        target=invitation,
        email=invitation.email,
        role=membership.role,
        user=user.username,
    )
    return membership


@transaction.atomic
def invitation_sign_up(
    *,
    raw: str,
    username: str,
    password: str,
    first_name: str = "",
    last_name: str = "",
) -> Any:
    """A new account with the invited address and the password chosen, then it joins the
    project. Refused with OIDC_ONLY=1 (no local passwords) and when an account already has
    the address (its owner logs in to accept)."""
    if settings.OIDC_ONLY:
        raise PermissionDenied("Passwords are off here: sign in with single sign-on.")
    invitation = invitation_find(raw=raw)
    refusal = invitation_refusal(invitation)
    if refusal:
        raise ValidationError(refusal)
    assert invitation is not None
    if get_user_model().objects.filter(email__iexact=invitation.email).exists():
        raise ValidationError(
            f"An account already uses {invitation.email}: log in with it to accept."
        )
    user = _unsaved_user(
        email=invitation.email,
        username=username,
        password=password,
        first_name=first_name,
        last_name=last_name,
    )
    refuse_another_active_user()
    user.set_password(password)
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        raise ValidationError({"username": f"The user name {user.username} is taken."}) from None
    audit.record(
        "user.create",
        actor=user,
        target=user,
        username=user.username,
        email=user.email,
        via="invitation",
    )
    invitation_accept(raw=raw, user=user)
    return user


def _unsaved_user(
    *, email: str, username: str, password: str, first_name: str, last_name: str
) -> Any:
    """The invited person's account, checked (names, then the password) but not saved."""
    User = get_user_model()
    user = User(
        username=(username or "").strip(),
        email=email,
        first_name=(first_name or "").strip()[:150],
        last_name=(last_name or "").strip()[:150],
    )
    try:
        user.full_clean(exclude=["password"])
    except ValidationError as exc:
        raise ValidationError(
            {
                k: v
                for k, v in exc.message_dict.items()
                if k in ("username", "first_name", "last_name")
            }
            or exc.messages
        ) from None
    try:
        password_validation.validate_password(password, user)
    except ValidationError as exc:
        raise ValidationError({"password1": exc.messages}) from None
    return user
