"""Single sign-on pages: off to the provider (to sign in, or to connect the signed-in account),
back from it, and the confirmation that connects an identity to one's own account."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache

from controlpanel.accounts import oidc, sso_accounts
from controlpanel.accounts.views import sso_context
from controlpanel.projects.access import page_login_required


def _safe_next(request: HttpRequest, url: str | None) -> str:
    if url and url_has_allowed_host_and_scheme(
        url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return url
    return ""


def _login_page(request: HttpRequest, error: str, status: int) -> HttpResponse:
    context = {"form": AuthenticationForm(request), "sso_error": error, "next": ""}
    context.update(sso_context())
    context.setdefault("passwords_off", False)
    return render(request, "registration/login.html", context, status=status)


@never_cache
def sso_login(request: HttpRequest) -> HttpResponse:
    """Off to the provider (GET: a link, so the page's CSP form-action allows the redirect).
    `?connect=1` (the settings page's link): the signed-in account asks to connect the
    identity it comes back with; nothing is connected before its confirmation."""
    if not oidc.oidc_enabled():
        raise Http404("Single sign-on is not configured.")
    if request.GET.get("connect") == "1":
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        request.session[sso_accounts.CONNECT_KEY] = request.user.pk
        request.session["oidc_next"] = ""
    else:
        request.session.pop(sso_accounts.CONNECT_KEY, None)
        request.session["oidc_next"] = _safe_next(request, request.GET.get("next"))
    try:
        return oidc.oidc_redirect(request)
    except oidc.OidcError as exc:
        return _login_page(request, str(exc), 502)


@never_cache
def sso_callback(request: HttpRequest) -> HttpResponse:
    """Back from the provider: verified, the user is signed in and sent where they were going
    (or, connecting, sent to confirm)."""
    if not oidc.oidc_enabled():
        raise Http404("Single sign-on is not configured.")
    try:
        claims = oidc.oidc_verify(request)
        connecting = request.session.pop(sso_accounts.CONNECT_KEY, None)
        if connecting is not None:
            return _connect_callback(request, connecting, claims)
        user = sso_accounts.oidc_sign_in(issuer=settings.OIDC_ISSUER, claims=claims)
    except oidc.OidcError as exc:
        return _login_page(request, str(exc), 403)
    next_url = request.session.pop("oidc_next", "")
    login(request, user, backend=oidc.BACKEND)
    return redirect(next_url or settings.LOGIN_REDIRECT_URL)


def _connect_callback(
    request: HttpRequest, connecting: Any, claims: dict[str, Any]
) -> HttpResponse:
    user: Any = request.user
    if not user.is_authenticated or user.pk != connecting:
        raise oidc.OidcError("Your session changed: log in again, then connect from Settings.")
    try:
        sso_accounts.connect_pending_set(
            session=request.session, user=user, issuer=settings.OIDC_ISSUER, claims=claims
        )
    except oidc.OidcError as exc:
        messages.error(request, str(exc))
        return redirect("user-settings")
    return redirect("sso-connect")


@never_cache
@page_login_required
def sso_connect(request: HttpRequest) -> HttpResponse:
    """Confirm (POST action=connect) or cancel the identity waiting in this session."""
    if not oidc.oidc_enabled():
        raise Http404("Single sign-on is not configured.")
    user: Any = request.user
    pending = sso_accounts.connect_pending(session=request.session, user=user)
    if request.method == "POST" and request.POST.get("action") == "cancel":
        sso_accounts.connect_cancel(session=request.session)
        messages.info(request, f"Nothing was connected to {settings.OIDC_PROVIDER_NAME}.")
        return redirect("user-settings")
    if request.method == "POST":
        try:
            sso_accounts.identity_connect(session=request.session, user=user)
        except oidc.OidcError as exc:
            context = {"refusal": str(exc), "provider": settings.OIDC_PROVIDER_NAME}
            return render(request, "accounts/sso_connect.html", context, status=409)
        messages.success(
            request, f"Connected: you can sign in with {settings.OIDC_PROVIDER_NAME} from now on."
        )
        return redirect("user-settings")
    if pending is None:
        return redirect("user-settings")
    context = {"pending": pending, "provider": settings.OIDC_PROVIDER_NAME}
    return render(request, "accounts/sso_connect.html", context)
