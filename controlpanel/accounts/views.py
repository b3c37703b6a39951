from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlpanel.accounts.forms import TokenCreateForm
from controlpanel.accounts.models import ApiToken
from controlpanel.accounts.services import token_create, token_revoke
from controlpanel.projects.access import page_login_required


def _settings_page(
    request: HttpRequest, form: TokenCreateForm, raw: str | None = None, status: int = 200
) -> HttpResponse:
    user: Any = request.user  # logged in: a User
    tokens = ApiToken.objects.filter(user=user)
    context = {"form": form, "tokens": tokens, "new_token": raw}
    return render(request, "accounts/settings.html", context, status=status)


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
    return _settings_page(request, TokenCreateForm(), raw=raw)


@require_POST
@page_login_required
def token_revoke_view(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    token_revoke(token=token)
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("user-settings")
