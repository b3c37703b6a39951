"""Site admins manage accounts from the panel's own pages (`/people/`): create one (its owner
sets the password through a one-time link), send a set-password link (the old password
stops working), deactivate (tokens revoked and sessions ended at once; their work in each
project handed over to a member there, or stopped) or reactivate, and hand a deactivated
person's running work over to someone else in its project.

Set-password links are Django's password-reset tokens: signed, valid PASSWORD_RESET_TIMEOUT
(3 days), and void once used (they hash the password they replace) or when the account
changes its password or logs in. Whoever holds the link owns the account, so a superuser's
link is made for superusers only, as only they deactivate one (issue 25). Each action is
audited; with the untrusted local backend no second account becomes active (local_guard).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.contrib.sessions.models import Session
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from controlpanel import audit
from controlpanel.accounts.invitations import mail_now
from controlpanel.accounts.local_guard import refuse_another_active_user
from controlpanel.accounts.models import ApiToken
from controlpanel.engine.leavers import (
    hand_over_target,
    leaver_work_hand_over,
    leaver_work_stop,
    owned_counts_of,
    owned_text,
)
from controlpanel.engine.models import LIVE_STATES, Workload
from controlpanel.projects.models import Membership, Project, Role
from controlpanel.streams import channels

log = logging.getLogger(__name__)


def _staff(by: Any) -> None:
    if not (by and by.is_authenticated and by.is_staff and by.is_active):
        raise PermissionDenied("Only site admins manage accounts.")


def password_link(user: Any) -> str:
    """A one-time link that lets `user` choose a password."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return settings.SITE_URL + reverse("password-set", kwargs={"uidb64": uid, "token": token})


def _send_password_link(user: Any, link: str, *, new: bool) -> None:
    if not user.email:
        return
    days = max(1, settings.PASSWORD_RESET_TIMEOUT // 86400)
    what = "An account was made for you" if new else "A site admin reset your password"
    mail_now(
        user.email,
        "[Ajuste] Choose your password",
        f"{what} on Ajuste (user name: {user.username}).\n\n"
        f"Choose your password with this link (it works once, for {days} days):\n\n{link}\n",
    )


@transaction.atomic
def user_create(
    *,
    by: Any,
    username: str,
    email: str,
    first_name: str = "",
    last_name: str = "",
    is_staff: bool = False,
    project: Project | None = None,
    role: str = Role.MEMBER,
) -> tuple[Any, str]:
    """A new account without a password; returns it and its set-password link (also
    e-mailed). Refused with OIDC_ONLY=1: such an account could never sign in (single sign-on
    makes accounts at a first sign-in and never joins one to an existing account by address)."""
    _staff(by)
    email = (email or "").strip()
    _user_create_check(email=email, role=role)
    user = get_user_model()(
        username=(username or "").strip(),
        email=email,
        first_name=(first_name or "").strip(),
        last_name=(last_name or "").strip(),
        is_staff=bool(is_staff),
    )
    user.set_unusable_password()
    user.full_clean()
    user.save()
    if project is not None:
        Membership.objects.create(project=project, user=user, role=role)
    audit.record(
        "user.create",
        actor=by,
        project=project,
        target=user,
        username=user.username,
        email=user.email,
        is_staff=user.is_staff,
        role=role if project is not None else None,
    )
    link = password_link(user)
    _send_password_link(user, link, new=True)
    return user, link


def _user_create_check(*, email: str, role: str) -> None:
    """What refuses a new account before it is built: passwords off, the local backend's one
    active user, an address already in use, an unknown role."""
    if settings.OIDC_ONLY:
        raise ValidationError(
            "Passwords are off (OIDC_ONLY=1): accounts are made at their first sign-in with "
            "single sign-on. Invite the person to a project, or map their group to one."
        )
    refuse_another_active_user()
    if email and get_user_model().objects.filter(email__iexact=email).exists():
        raise ValidationError({"email": f"An account already uses {email}."})
    if role not in Role.values:
        raise ValidationError({"role": f"Unknown role {role!r}; use member or manager."})


@transaction.atomic
def user_password_reset(*, by: Any, user: Any) -> str:
    """The account's password stops working (its sessions end with it) and a one-time
    set-password link is made, e-mailed, and returned for the admin to pass on."""
    _staff(by)
    if settings.OIDC_ONLY:
        raise ValidationError(
            "Passwords are off (OIDC_ONLY=1): people sign in with single sign-on."
        )
    if not user.is_active:
        raise ValidationError(f"{user.username} is deactivated: reactivate the account first.")
    if user.is_superuser and not by.is_superuser:
        raise PermissionDenied("Only a superuser can reset a superuser's password.")
    user.set_unusable_password()
    user.save(update_fields=["password"])
    end_sessions(user)
    link = password_link(user)
    _send_password_link(user, link, new=False)
    audit.record("user.password_reset", actor=by, target=user, username=user.username)
    log.info("%s reset the password of %s", by, user)
    return link


@dataclass(frozen=True)
class Handed:
    """What a deactivation gave one heir in one project (`what`: "1 job, 2 notebooks")."""

    project: Project
    heir: Any
    what: str


@transaction.atomic
def user_deactivate(
    *, by: Any, user: Any, hand_over: Mapping[int, str] | None = None
) -> list[Handed]:
    """The account can no longer sign in (password or SSO); its API tokens are revoked and
    its sessions end now; its memberships are kept (see `live_workloads_of`). Its work in a
    project named in `hand_over` (project id -> an active member's username) becomes that
    member's, as a removal hands it over (engine/leavers.py); everything else stops. Every heir
    is checked before anything changes. What was handed over."""
    _staff(by)
    if user.pk == by.pk:
        raise ValidationError("You cannot deactivate your own account.")
    if user.is_superuser and not by.is_superuser:
        raise PermissionDenied("Only a superuser can deactivate a superuser.")
    heirs = _heirs(user, hand_over or {})
    type(user).objects.filter(pk=user.pk).update(is_active=False)
    user.is_active = False
    ApiToken.objects.filter(user=user, revoked_at=None).update(revoked_at=timezone.now())
    end_sessions(user)
    owned = owned_counts_of(user=user)
    handed = []
    for project, heir in heirs:
        what = owned_text(owned.get(project.pk, Counter()))
        if what:
            leaver_work_hand_over(project=project, leaver=user, to=heir, by=by)
            handed.append(Handed(project=project, heir=heir, what=what))
    # The rest stops in every project (engine/leavers.py): a deactivated account runs nothing.
    leaver_work_stop(user=user, reason=f"stopped: {user.username}'s account was deactivated")
    given = [f"{h.project.slug}: {h.heir.username}" for h in handed]  # each audited too
    extra = {"handed_over": given} if given else {}
    audit.record("user.deactivate", actor=by, target=user, username=user.username, **extra)
    log.info("%s deactivated %s", by, user)
    return handed


def _heirs(user: Any, hand_over: Mapping[int, str]) -> list[tuple[Project, Any]]:
    """(project, heir) for each project named with a username; a ValidationError that says
    which project and why for an unknown project or a heir who is not its active member."""
    heirs = []
    for project_id, username in hand_over.items():
        if not (username or "").strip():
            continue  # nobody: their work there stops
        project = Project.objects.filter(pk=project_id).first()
        if project is None:
            raise ValidationError({"hand_over_to": "No such project."})
        heirs.append(
            (project, hand_over_target(project=project, leaver=user, username=username.strip()))
        )
    return heirs


@transaction.atomic
def user_reactivate(*, by: Any, user: Any) -> None:
    """The account may sign in again (its revoked tokens stay revoked)."""
    _staff(by)
    if user.is_active:
        return
    refuse_another_active_user(user=user)
    type(user).objects.filter(pk=user.pk).update(is_active=True)
    user.is_active = True
    audit.record("user.reactivate", actor=by, target=user, username=user.username)


def end_sessions(user: Any) -> int:
    """Delete the user's sessions in the database (the session engine here). Any other
    session is refused anyway: the backends load no inactive user, and a password change
    voids the sessions it opened. Their open streams end too (streams/viewer.py)."""
    channels.access_changed(user_id=user.pk)
    if settings.SESSION_ENGINE not in (
        "django.contrib.sessions.backends.db",
        "django.contrib.sessions.backends.cached_db",
    ):
        return 0
    ended = 0
    pk = str(user.pk)
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        if session.get_decoded().get("_auth_user_id") == pk:
            session.delete()
            ended += 1
    return ended


@transaction.atomic
def workload_hand_over(*, by: Any, workload: Workload, to: Any) -> Workload:
    """`to` becomes the workload's owner (site admins only); they must be an active member
    of its project."""
    _staff(by)
    if not to.is_active:
        raise ValidationError({"to": f"{to.username} is deactivated."})
    if not Membership.objects.filter(project_id=workload.project_id, user=to).exists():
        raise ValidationError({"to": f"{to.username} is not a member of {workload.project.name}."})
    Workload.objects.filter(pk=workload.pk).update(owner=to, updated_at=timezone.now())
    workload.owner = to
    return workload


def live_workloads_of(user: Any) -> list[Workload]:
    """What the user started that still runs or waits (every kind), oldest first."""
    return list(
        Workload.objects.filter(owner=user, state__in=LIVE_STATES)
        .select_related("project", "flavor")
        .order_by("created_at")
    )
