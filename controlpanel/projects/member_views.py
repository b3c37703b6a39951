"""The project's members page: add, invite, change a role, remove (managers and site admins)."""

from __future__ import annotations

from collections import Counter

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlpanel.accounts import invitations
from controlpanel.accounts.forms import InviteForm
from controlpanel.accounts.models import Invitation
from controlpanel.accounts.selectors import grants_in, pending_invitations
from controlpanel.engine.leavers import owned_counts, owned_text
from controlpanel.projects import services
from controlpanel.projects.access import ProjectRequest, project_view
from controlpanel.projects.forms import MemberAddForm, MemberRoleForm
from controlpanel.projects.models import Membership
from controlpanel.projects.selectors import members_of


def _members_page(
    request: ProjectRequest,
    *,
    form: MemberAddForm | None = None,
    invite_form: InviteForm | None = None,
    status: int = 200,
) -> HttpResponse:
    access = request.access
    members = list(members_of(project=access.project))
    counts = owned_counts(project=access.project) if access.can_manage else {}
    for m in members:  # what a removal would hand over or stop ("3 notebooks, 2 apps")
        setattr(m, "owned", owned_text(counts.get(m.user_id, Counter())))  # noqa: B010
    context = {
        "project": access.project,
        "members": members,
        "grants": grants_in(project=access.project),
        "invitations": pending_invitations(project=access.project) if access.can_manage else [],
        "form": form or MemberAddForm(),
        "invite_form": invite_form or InviteForm(),
        "role_form": MemberRoleForm(),
        "invitation_days": settings.INVITATION_DAYS,
        "local_backend_warning": access.can_manage and bool(_local_trust_warning()),
    }
    return render(request, "projects/members.html", context, status=status)


def _local_trust_warning() -> bool:
    """`make run`'s local backend refuses to start with a second active user unless the
    operator says everyone is trusted alike: managers are told before they invite."""
    return settings.COMPUTE_BACKEND == "local" and not settings.AJUSTE_LOCAL_BACKEND_TRUSTED


@project_view()
def member_list(request: ProjectRequest) -> HttpResponse:
    access = request.access
    if request.method != "POST":
        return _members_page(request)
    form = MemberAddForm(request.POST)
    if not access.can_manage:
        return HttpResponse("Only the project's managers can add members.", status=403)
    if form.is_valid():
        try:
            services.member_add(
                access=access,
                user=form.cleaned_data["username"],
                role=form.cleaned_data["role"],
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, f"Added {form.cleaned_data['username'].username}.")
            return redirect("member-list", slug=access.project.slug)
    return _members_page(request, form=form, status=400)


@require_POST
@project_view()
def member_invite(request: ProjectRequest) -> HttpResponse:
    """Invite by e-mail address (managers and site admins): a one-time link by e-mail, which
    whoever has the address opens and confirms (nobody is added by address alone)."""
    access = request.access
    if not access.can_manage:
        return HttpResponse("Only the project's managers can invite people.", status=403)
    form = InviteForm(request.POST)
    if form.is_valid():
        try:
            invitations.invitation_create(
                access=access,
                by=request.user,
                email=form.cleaned_data["email"],
                role=form.cleaned_data["role"],
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            messages.success(
                request,
                f"Invitation sent to {form.cleaned_data['email']} (valid "
                f"{settings.INVITATION_DAYS} days).",
            )
            return redirect("member-list", slug=access.project.slug)
    return _members_page(request, invite_form=form, status=400)


@require_POST
@project_view(manage=True)
def invitation_revoke(request: ProjectRequest, invitation_id: int) -> HttpResponse:
    access = request.access
    invitation = get_object_or_404(Invitation, pk=invitation_id, project=access.project)
    try:
        invitations.invitation_revoke(access=access, invitation=invitation)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(
            request, f"Invitation to {invitation.email} revoked: its link no longer works."
        )
    return redirect("member-list", slug=access.project.slug)


@require_POST
@project_view(manage=True)
def member_update(request: ProjectRequest, member_id: int) -> HttpResponse:
    access = request.access
    membership = get_object_or_404(Membership, pk=member_id, project=access.project)
    try:
        if request.POST.get("action") == "remove":
            heir = request.POST.get("hand_over_to", "").strip()
            handed = services.member_remove(access=access, membership=membership, hand_over_to=heir)
            what = owned_text(Counter(w.kind for w in handed))
            given = f" Their {what} now belong to {heir}." if handed else ""
            messages.success(request, f"Removed {membership.user.username}.{given}")
        else:
            form = MemberRoleForm(request.POST)
            if not form.is_valid():
                raise ValidationError("Choose member or manager.")
            services.member_set_role(
                access=access, membership=membership, role=form.cleaned_data["role"]
            )
            messages.success(request, f"{membership.user.username} is now {membership.role}.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("member-list", slug=access.project.slug)
