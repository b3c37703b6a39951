"""Project pages: home, settings (limits, webhook, app-only tokens, GPU sharing), secrets,
creation. The members page is member_views.py."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_http_methods, require_POST

from controlpanel.accounts.models import AppToken
from controlpanel.buckets.crypto import secret_hint
from controlpanel.core.htmx import wants_fragment
from controlpanel.projects import services
from controlpanel.projects.access import ProjectAccess, ProjectRequest, project_view
from controlpanel.projects.first_run import first_run_dismiss, first_run_for
from controlpanel.projects.forms import ProjectForm, ProjectSettingsForm, SecretForm, WebhookForm
from controlpanel.projects.models import QUOTA_FIELDS, Project, ProjectSecret
from controlpanel.projects.selectors import secrets_of
from controlpanel.projects.settings_rules import (
    SETTING_FIELDS,
    FieldsRefused,
    project_field,
    project_settings_check,
)
from controlpanel.queues.forms import SharingForm
from controlpanel.queues.selectors import kueue_on
from controlpanel.queues.services import project_queue_update, sharing_check
from controlpanel.served import app_tokens


@require_http_methods(["GET", "HEAD"])
@project_view()
def project_home(request: ProjectRequest) -> HttpResponse:
    """The project's landing page: where to start, its limits, its secrets' names."""
    project = request.access.project
    context = {
        "project": project,
        "member_count": project.memberships.count(),
        "secrets": secrets_of(project=project),
        "secret_form": SecretForm(),
        "first_run": first_run_for(project=project, user=request.user),
    }
    return render(request, "projects/home.html", context)


@require_POST
@project_view()
def first_run_close(request: ProjectRequest) -> HttpResponse:
    """Close the first-run card for oneself; htmx gets nothing back (the card goes)."""
    first_run_dismiss(project=request.access.project, user=request.user)
    if wants_fragment(request):
        return HttpResponse("")
    return redirect("project-home", slug=request.access.project.slug)


@project_view(manage=True)
def project_settings(request: ProjectRequest) -> HttpResponse:
    """What managers change on their project (idle limit, budget, job webhook) and site admins
    besides (quotas). POST `action`: settings-save, or webhook-save / -reveal / -rotate."""
    access = request.access
    if request.method != "POST":
        return _settings_page(request, access)
    action = request.POST.get("action", "settings-save")
    if action.startswith("webhook-"):
        return _webhook_post(request, access, action)
    if action.startswith("app-token-"):
        return _app_token_post(request, access, action)
    if action == "sharing-save":
        return _sharing_save(request, access)
    return _settings_save(request, access)


def _sharing_save(request: HttpRequest, access: ProjectAccess) -> HttpResponse:
    """How the project shares GPUs in Kueue's cohort (site admins; queues/services.py)."""
    try:
        sharing_check(access=access)
    except PermissionDenied as exc:
        return HttpResponse(str(exc), status=403, content_type="text/plain; charset=utf-8")
    form = SharingForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, access, sharing_form=form)
    try:
        changed = project_queue_update(access=access, changes=form.cleaned_data)
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            for error in errors:
                form.add_error(field if field in form.fields else None, error)
        return _settings_page(request, access, sharing_form=form)
    names = ", ".join(str(form.fields[n].label) for n in changed) or "nothing changed"
    messages.success(request, f"GPU sharing saved: {names}.")
    return redirect("project-settings", slug=access.project.slug)


def _settings_page(
    request: HttpRequest,
    access: ProjectAccess,
    *,
    form: ProjectSettingsForm | None = None,
    webhook_form: WebhookForm | None = None,
    secret: str = "",
    new: bool = False,
    app_token: str = "",
    app_token_error: str = "",
    sharing_form: SharingForm | None = None,
) -> HttpResponse:
    """`secret` is shown in full (just made, or asked for), otherwise only its last characters;
    `app_token` is a new app-only token's raw value, shown this once."""
    project = access.project
    context = {
        "app_tokens": AppToken.objects.filter(project=project).select_related("created_by"),
        "app_token": app_token,
        "app_token_error": app_token_error,
        "project": project,
        "form": form or ProjectSettingsForm(initial=_initial(project), with_quotas=access.is_admin),
        "quotas": None if access.is_admin else _quotas(project),
        # Site admins: the cohort's borrowing, lending and weight (QUEUE_ENGINE=kueue).
        "sharing_form": (sharing_form or SharingForm(initial=SharingForm.initial_for(project)))
        if access.is_admin
        else None,
        "kueue": kueue_on(),
        "webhook_form": webhook_form or WebhookForm(initial={"webhook_url": project.webhook_url}),
        "webhook_secret_hint": secret_hint(project.webhook_secret, head=0)
        if project.webhook_secret
        else "",
        "webhook_secret": secret,
        "webhook_secret_new": new,
    }
    invalid = (
        (form is not None and form.errors)
        or (webhook_form is not None and webhook_form.errors)
        or app_token_error
        or (sharing_form is not None and sharing_form.errors)
    )
    response = render(request, "projects/settings.html", context, status=400 if invalid else 200)
    if secret or app_token:
        add_never_cache_headers(response)
    return response


def _quotas(project: Project) -> list[tuple[str, str]]:
    """The quotas as a manager reads them (site admins change them in the form); 0 is no
    limit but for GPUs (none at all)."""
    shown = []
    for name in QUOTA_FIELDS:
        value = getattr(project, name)
        limitless = value == 0 and name != "gpu_quota"
        shown.append((_label(name), "no limit" if limitless else str(value)))
    return shown


def _initial(project: Project) -> dict[str, Any]:
    return {name: getattr(project, name) for name in SETTING_FIELDS if name != "webhook_url"}


def _settings_save(request: HttpRequest, access: ProjectAccess) -> HttpResponse:
    form = ProjectSettingsForm(request.POST, with_quotas=access.is_admin)
    try:  # a quota in a manager's POST is refused by name, not ignored
        forged = [name for name in QUOTA_FIELDS if name in request.POST]
        project_settings_check(access=access, fields=[*form.fields, *forged])
    except FieldsRefused as exc:
        return HttpResponse(str(exc), status=403, content_type="text/plain; charset=utf-8")
    if not form.is_valid():
        return _settings_page(request, access, form=form)
    try:
        result = services.project_settings_update(access=access, changes=form.changes())
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            for error in errors:
                form.add_error(field if field in form.fields else None, error)
        return _settings_page(request, access, form=form)
    if result.admits_more:
        from controlpanel.engine.tasks import admit_soon  # the engine reads projects

        admit_soon(access.project.pk)
    names = ", ".join(_label(name) for name in result.changed) or "nothing changed"
    messages.success(request, f"Settings saved: {names}.")
    return redirect("project-settings", slug=access.project.slug)


def _label(name: str) -> str:
    return str(project_field(name).verbose_name)


@sensitive_variables("secret")
def _webhook_post(request: HttpRequest, access: ProjectAccess, action: str) -> HttpResponse:
    if action == "webhook-reveal":
        return _settings_page(request, access, secret=access.project.webhook_secret)
    if action == "webhook-rotate":
        try:
            secret = services.project_webhook_secret_rotate(access=access)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect("project-settings", slug=access.project.slug)
        return _settings_page(request, access, secret=secret, new=True)
    return _webhook_save(request, access)


@sensitive_variables("raw")
def _app_token_post(request: HttpRequest, access: ProjectAccess, action: str) -> HttpResponse:
    """Make an app-only token (its raw value on the page this once) or revoke one."""
    try:
        if action == "app-token-revoke":
            raw_id = request.POST.get("token", "")
            token_id = int(raw_id) if raw_id.isdigit() else 0
            token = app_tokens.app_token_revoke(access=access, token_id=token_id)
            messages.success(request, f"Token {token.name} revoked: the apps refuse it now.")
            return redirect("project-settings", slug=access.project.slug)
        _, raw = app_tokens.app_token_create(
            access=access, by=request.user, name=request.POST.get("name", "")
        )
    except AppToken.DoesNotExist:
        messages.error(request, "No such app-only token in this project.")
        return redirect("project-settings", slug=access.project.slug)
    except ValidationError as exc:
        return _settings_page(request, access, app_token_error=" ".join(exc.messages))
    return _settings_page(request, access, app_token=raw)


@sensitive_variables("secret")
def _webhook_save(request: HttpRequest, access: ProjectAccess) -> HttpResponse:
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, access, webhook_form=form)
    try:
        secret = services.project_webhook_set(access=access, url=form.cleaned_data["webhook_url"])
    except ValidationError as exc:
        form.add_error(None, exc)
        return _settings_page(request, access, webhook_form=form)
    if secret:
        return _settings_page(request, access, secret=secret, new=True)
    saved = "saved" if access.project.webhook_url else "removed"
    messages.success(request, f"Job webhook {saved}.")
    return redirect("project-settings", slug=access.project.slug)


@require_POST
@project_view()
@sensitive_post_parameters("value")
@sensitive_variables("value")
def project_secrets(request: ProjectRequest) -> HttpResponse:
    """Set (`action=set`, name and value) or delete (`action=delete`, name) a project secret;
    managers and site admins only. An htmx request gets the secrets section back, others a
    redirect to the project page. The value is never rendered, not even after an error."""
    access = request.access
    if not access.can_manage:
        return HttpResponse("Only the project's managers can change secrets.", status=403)
    form = SecretForm(request.POST)
    name = request.POST.get("name", "")
    try:
        if request.POST.get("action") == "delete":
            services.project_secret_delete(access=access, name=name)
            messages.success(request, f"Secret {name} deleted.")
        elif form.is_valid():
            value = form.cleaned_data["value"]
            services.project_secret_set(
                access=access, by=request.user, name=form.cleaned_data["name"], value=value
            )
            messages.success(request, f"Secret {form.cleaned_data['name']} saved.")
            form = SecretForm()
    except ProjectSecret.DoesNotExist as exc:
        messages.error(request, str(exc))
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            for error in errors:
                form.add_error(field if field in form.fields else None, error)
    return _secrets_answer(request, access, form)


def _secrets_answer(request: HttpRequest, access: ProjectAccess, form: SecretForm) -> HttpResponse:
    status = 400 if form.errors else 200
    if wants_fragment(request):
        context = {
            "project": access.project,
            "current_access": access,
            "secrets": secrets_of(project=access.project),
            "secret_form": form,
        }
        return render(request, "projects/home.html#secrets", context, status=status)
    if form.errors:
        messages.error(request, " ".join(str(m) for ms in form.errors.values() for m in ms))
    return redirect(reverse("project-home", kwargs={"slug": access.project.slug}) + "#secrets")


@staff_member_required
def project_create(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        project: Project = services.project_create(by=request.user, **form.cleaned_data)
        messages.success(request, f"Project {project.name} created. Add its members.")
        return redirect("member-list", slug=project.slug)
    return render(
        request, "projects/create.html", {"form": form}, status=400 if form.errors else 200
    )
