"""The site admins' people pages (`/people/`): list, create, and one person's page (projects,
sign-in, tokens, running work; set-password link, deactivate (handing their work in each
project over to a member there, or stopping it), reactivate; stop or hand over their running
work). Anyone else gets 404; a signed-out visitor is sent to log in."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_POST

from controlpanel.accounts import people
from controlpanel.accounts.forms import HandOverForm, UserCreateForm
from controlpanel.accounts.models import ApiToken
from controlpanel.accounts.selectors import group_grants_of, memberships_of
from controlpanel.accounts.selectors import people as people_query
from controlpanel.accounts.views import _form_errors
from controlpanel.engine.leavers import owned_counts_of, owned_text
from controlpanel.engine.models import Workload
from controlpanel.engine.services import workload_stop
from controlpanel.projects.access import project_access, site_admin_page
from controlpanel.projects.models import Membership, Project


@site_admin_page
def people_list(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "")[:100]
    page = Paginator(people_query(query=query), 50).get_page(request.GET.get("page"))
    return render(request, "accounts/people.html", {"page": page, "query": query})


@site_admin_page
def people_create(request: HttpRequest) -> HttpResponse:
    form = UserCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            user, link = people.user_create(
                by=request.user,
                username=data["username"],
                email=data["email"],
                first_name=data["first_name"],
                last_name=data["last_name"],
                is_staff=data["is_staff"],
                project=data["project"],
                role=data["role"],
            )
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            messages.success(request, f"Account {user.username} created.")
            return _person_page(request, user, link=link)
    status = 400 if form.errors else 200
    return render(request, "accounts/people_new.html", {"form": form}, status=status)


def _person_page(
    request: HttpRequest,
    person: Any,
    *,
    link: str = "",
    hand_over: HandOverForm | None = None,
    status: int = 200,
) -> HttpResponse:
    grants = group_grants_of(user=person)
    context = {
        "person": person,
        "memberships": [(m, grants.get(m.project_id)) for m in memberships_of(user=person)],
        "identities": person.oidc_identities.all(),
        "active_tokens": ApiToken.objects.filter(user=person, revoked_at=None).count(),
        "workloads": people.live_workloads_of(person),
        "link": link,
        "hand_over": hand_over or HandOverForm(),
        "heir_choices": _heir_choices(person) if person.is_active else [],
    }
    response = render(request, "accounts/person.html", context, status=status)
    if link:
        add_never_cache_headers(response)
    return response


@site_admin_page
def person_detail(request: HttpRequest, user_id: int) -> HttpResponse:
    person = get_object_or_404(get_user_model(), pk=user_id)
    if request.method != "POST":
        return _person_page(request, person)
    action = request.POST.get("action")
    try:
        if action == "password-link":
            link = people.user_password_reset(by=request.user, user=person)
            messages.success(
                request,
                f"{person.username}'s password no longer works; the link below lets them "
                "choose a new one" + (f" (also sent to {person.email})." if person.email else "."),
            )
            return _person_page(request, person, link=link)
        if action == "deactivate":
            handed = people.user_deactivate(
                by=request.user, user=person, hand_over=_hand_over_posted(request)
            )
            given = "".join(
                f" Their {h.what} in {h.project.name} now belong to {h.heir.username}."
                for h in handed
            )
            messages.success(
                request,
                f"{person.username} is deactivated: their tokens are revoked and their sessions "
                f"ended.{given} Anything else they ran or queued is stopping (listed below).",
            )
        elif action == "reactivate":
            people.user_reactivate(by=request.user, user=person)
            messages.success(request, f"{person.username} can sign in again.")
        else:
            messages.error(request, "Unknown action.")
    except (ValidationError, PermissionDenied) as exc:
        messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
    return redirect("person-detail", user_id=person.pk)


HAND_OVER = "hand_over_to_"  # + a project's id: the heir chosen for that project


def _hand_over_posted(request: HttpRequest) -> dict[int, str]:
    """The deactivation form's heirs: project id -> username ("" for nobody: stop it)."""
    chosen = {}
    for key in request.POST:
        if key.startswith(HAND_OVER):
            project_id = key[len(HAND_OVER) :]
            if not project_id.isdigit():
                raise ValidationError("No such project.")
            chosen[int(project_id)] = request.POST.get(key, "").strip()
    return chosen


def _heir_choices(person: Any) -> list[dict[str, Any]]:
    """Per project where `person` owns work: what they own there and the active members who
    could take it (people.user_deactivate checks the choice)."""
    owned = owned_counts_of(user=person)
    projects = Project.objects.filter(pk__in=owned).order_by("name")
    members = Membership.objects.filter(project__in=projects, user__is_active=True).exclude(
        user=person
    )
    names: dict[int, list[str]] = {}
    for project_id, username in members.order_by("user__username").values_list(
        "project_id", "user__username"
    ):
        names.setdefault(project_id, []).append(username)
    return [
        {
            "project": project,
            "field": f"{HAND_OVER}{project.pk}",
            "what": owned_text(owned[project.pk]),
            "members": names.get(project.pk, []),
        }
        for project in projects
    ]


@require_POST
@site_admin_page
def person_workload(request: HttpRequest, user_id: int, workload_id: str) -> HttpResponse:
    """Stop one of the person's running workloads, or hand it over to another member."""
    person = get_object_or_404(get_user_model(), pk=user_id)
    workload = get_object_or_404(
        Workload.objects.select_related("project"), pk=workload_id, owner=person
    )
    try:
        if request.POST.get("action") == "hand-over":
            form = HandOverForm(request.POST)
            if not form.is_valid():
                return _person_page(request, person, hand_over=form, status=400)
            to = get_user_model().objects.filter(username=form.cleaned_data["to"].strip()).first()
            if to is None:
                form.add_error("to", f"No user named “{form.cleaned_data['to']}”.")
                return _person_page(request, person, hand_over=form, status=400)
            people.workload_hand_over(by=request.user, workload=workload, to=to)
            messages.success(request, f"{workload.name} now belongs to {to.username}.")
        else:
            _stop(request, workload)
            messages.success(request, f"{workload.name} is stopping.")
    except (ValidationError, PermissionDenied) as exc:
        messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
    return redirect("person-detail", user_id=person.pk)


def _stop(request: HttpRequest, workload: Workload) -> None:
    access = project_access(user=request.user, slug=workload.project.slug)
    workload_stop(access=access, user=request.user, workload=workload)
