from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth import views as auth_views
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.cache import add_never_cache_headers
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from controlpanel.accounts import invitations, oidc
from controlpanel.accounts.forms import SignUpForm, TokenCreateForm
from controlpanel.accounts.models import ApiToken
from controlpanel.accounts.selectors import group_grants_of, memberships_of, user_month_usage
from controlpanel.accounts.services import token_create, token_revoke
from controlpanel.billing.selectors import current_month
from controlpanel.projects.access import page_login_required

PASSWORD_BACKEND = "controlpanel.accounts.backends.PasswordBackend"  # noqa: S105 (a path)


def sso_context(next_url: str = "") -> dict[str, Any]:
    """What the log-in and invitation pages need to show the provider's button."""
    if not oidc.oidc_enabled():
        return {"sso": None}
    url = reverse("oidc-login")
    if next_url:
        url += "?" + urlencode({"next": next_url})
    return {
        "sso": {"name": settings.OIDC_PROVIDER_NAME, "url": url},
        "passwords_off": settings.OIDC_ONLY,
    }


class LoginView(auth_views.LoginView):
    """Django's log-in page, with the provider's button; with OIDC_ONLY=1 no password form."""

    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(sso_context(self.get_redirect_url()))
        context.setdefault("passwords_off", False)
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if settings.OIDC_ONLY:
            context = self.get_context_data(
                sso_error=f"Passwords are off here: sign in with {settings.OIDC_PROVIDER_NAME}."
            )
            return self.render_to_response(context, status=403)
        return super().post(request, *args, **kwargs)


def _settings_page(
    request: HttpRequest, form: TokenCreateForm, raw: str | None = None, status: int = 200
) -> HttpResponse:
    user: Any = request.user  # logged in: a User
    tokens = ApiToken.objects.filter(user=user)
    grants = group_grants_of(user=user)
    memberships = [(m, grants.get(m.project_id)) for m in memberships_of(user=user)]
    context = {
        "form": form,
        "tokens": tokens,
        "new_token": raw,
        "memberships": memberships,
        "usage": user_month_usage(user=user, month=current_month()),
        "identities": user.oidc_identities.all(),
        "can_change_password": user.has_usable_password() and not settings.OIDC_ONLY,
        "sso_connect": _sso_connect_offer(user),
    }
    return render(request, "accounts/settings.html", context, status=status)


def _sso_connect_offer(user: Any) -> dict[str, str] | None:
    """The settings page's "Connect" link, while the account has no identity at the provider
    (connecting is the only way an existing account gets one: see sso_accounts)."""
    if not oidc.oidc_enabled() or user.oidc_identities.filter(issuer=settings.OIDC_ISSUER).exists():
        return None
    return {"name": settings.OIDC_PROVIDER_NAME, "url": reverse("oidc-login") + "?connect=1"}


@page_login_required
def user_settings(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _settings_page(request, TokenCreateForm())
    form = TokenCreateForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, form, status=400)
    try:
        _, raw = token_create(
            user=request.user,
            name=form.cleaned_data["name"],
            expires_at=form.cleaned_data["expires_on"],
        )
    except ValidationError as exc:
        form.add_error(None, exc)
        return _settings_page(request, form, status=400)
    # Shown once, in this response only; never stored in clear nor put in the session.
    response = _settings_page(request, TokenCreateForm(), raw=raw)
    add_never_cache_headers(response)
    return response


@require_POST
@page_login_required
def token_revoke_view(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    token_revoke(token=token)
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("user-settings")


@never_cache
@sensitive_post_parameters("password1", "password2")
def invitation_accept_view(request: HttpRequest, token: str) -> HttpResponse:
    """The invitation link: join (signed in with the invited address), or make an account
    with a password, or sign in (password or single sign-on) and come back."""
    invitation = invitations.invitation_find(raw=token)
    refusal = invitations.invitation_refusal(invitation)
    if refusal:
        status = 404 if invitation is None else 410
        return render(request, "accounts/invitation.html", {"refusal": refusal}, status=status)
    assert invitation is not None
    user: Any = request.user
    here = request.get_full_path()
    context: dict[str, Any] = {"invitation": invitation, "here": here, **sso_context(here)}
    context.setdefault("passwords_off", False)
    if user.is_authenticated:
        return _invitation_join(request, token, invitation, context)
    has_account = get_user_model().objects.filter(email__iexact=invitation.email).exists()
    context["has_account"] = has_account
    context["login_url"] = reverse("login") + "?" + _query(next=here)
    if has_account or settings.OIDC_ONLY:
        return render(request, "accounts/invitation.html", context)
    form = SignUpForm(request.POST or None, initial={"username": _suggested(invitation.email)})
    context["form"] = form
    if request.method == "POST" and form.is_valid():
        try:
            new_user = invitations.invitation_sign_up(
                raw=token,
                username=form.cleaned_data["username"],
                password=form.cleaned_data["password1"],
                first_name=form.cleaned_data["first_name"],
                last_name=form.cleaned_data["last_name"],
            )
        except ValidationError as exc:
            _form_errors(form, exc)
        except PermissionDenied as exc:
            form.add_error(None, str(exc))
        else:
            login(request, new_user, backend=PASSWORD_BACKEND)
            messages.success(request, f"Welcome to {invitation.project.name}.")
            return redirect("project-home", slug=invitation.project.slug)
    status = 400 if request.method == "POST" else 200
    return render(request, "accounts/invitation.html", context, status=status)


def _invitation_join(
    request: HttpRequest, token: str, invitation: Any, context: dict[str, Any]
) -> HttpResponse:
    """The invitation page for someone signed in: join on POST if the address is theirs."""
    user: Any = request.user
    if not invitations.same_address(user.email or "", invitation.email):
        context["wrong_address"] = True
        return render(request, "accounts/invitation.html", context, status=403)
    if request.method == "POST":
        try:
            membership = invitations.invitation_accept(raw=token, user=user)
        except (ValidationError, PermissionDenied) as exc:
            context["refusal"] = " ".join(getattr(exc, "messages", [str(exc)]))
            return render(request, "accounts/invitation.html", context, status=409)
        messages.success(
            request, f"Welcome to {membership.project.name}: you are a {membership.role}."
        )
        return redirect("project-home", slug=membership.project.slug)
    return render(request, "accounts/invitation.html", context)


def _query(**params: str) -> str:
    return urlencode(params)


def _suggested(email: str) -> str:
    return re.sub(r"[^\w.@+-]", "-", email.split("@", 1)[0])[:150]


def _form_errors(form: Any, exc: ValidationError) -> None:
    if hasattr(exc, "error_dict"):
        for field, errors in exc.message_dict.items():
            for error in errors:
                form.add_error(field if field in form.fields else None, error)
    else:
        for error in exc.messages:
            form.add_error(None, error)


class PasswordSetView(auth_views.PasswordResetConfirmView):
    """The one-time set-password link an admin sends (new account, or a reset)."""

    template_name = "accounts/password_set.html"
    success_url = reverse_lazy("password-set-done")
    post_reset_login = False

    def dispatch(self, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if settings.OIDC_ONLY:
            raise Http404("Passwords are off here.")
        return super().dispatch(*args, **kwargs)

    def get_user(self, uidb64: str) -> Any:
        user = super().get_user(uidb64)
        return user if user is not None and user.is_active else None


class PasswordSetDoneView(auth_views.PasswordResetCompleteView):
    template_name = "accounts/password_set_done.html"
