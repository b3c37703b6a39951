"""The append-only audit log (#18): every action recorded once through its real service (or the
real page or API that calls it), with the right actor, project, target and details and never a
secret; the log refuses updates and deletes; the admins' page filters, pages and exports the
same rows; nobody else sees it."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.admin.sites import site as admin_site
from django.db import transaction
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.utils import timezone

from controlpanel import audit
from controlpanel.accounts import invitations, people
from controlpanel.accounts.services import token_create
from controlpanel.audit.log import AuditRequestMiddleware
from controlpanel.audit.models import AppendOnlyError, AuditEvent
from controlpanel.audit.views import CSV_COLUMNS, csv_row
from controlpanel.billing import budgets
from controlpanel.billing.prices import price_add
from controlpanel.billing.services import period_close, period_lock, period_reopen
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.services import job_delete, job_rerun, job_stop
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.services import notebook_create, notebook_delete, notebook_stop
from controlpanel.projects.access import project_access
from controlpanel.projects.models import Membership, Project, Role
from controlpanel.served.models import App
from controlpanel.served.services import app_delete, app_start, app_stop
from tests.fixtures.jobs import access_for, submit
from tests.fixtures.panel import UserFactory, api_client_for, logged_in

pytestmark = pytest.mark.django_db


def only(action: str) -> AuditEvent:
    events = list(AuditEvent.objects.filter(action=action))
    assert len(events) == 1, [(e.action, e.details) for e in events]
    return events[0]


def in_request(user: Any, call: Callable[[], Any], ip: str = "203.0.113.7") -> Any:
    """Run `call` as a request of `user` through the audit middleware (a service that is handed
    only a project access logs the request's user)."""
    request = RequestFactory().post("/", REMOTE_ADDR=ip)
    request.user = user
    request.request_id = "req-0123456789"  # type: ignore[attr-defined]  # as RequestIdMiddleware
    result: list[Any] = []

    def view(request: Any) -> Any:
        result.append(call())
        return HttpResponse()

    AuditRequestMiddleware(view)(request)
    return result[0]


# --- log-ins ---------------------------------------------------------------------------------


def test_a_log_in_and_a_failed_one_are_recorded_without_the_password(db: Any) -> None:
    UserFactory(username="carol", password="right-password-123")
    client = Client(REMOTE_ADDR="198.51.100.4")
    response = client.post(
        "/login/",
        {"username": "carol", "password": "wrong-password-456"},
        HTTP_X_REQUEST_ID="abcdef0123456789",
    )
    assert response.status_code == 200
    failed = only("auth.login_failed")
    assert failed.actor is None
    assert failed.details == {"username": "carol"}
    assert (failed.ip, failed.request_id) == ("198.51.100.4", "abcdef0123456789")
    response = client.post("/login/", {"username": "carol", "password": "right-password-123"})
    assert response.status_code == 302
    login = only("auth.login")
    assert login.actor is not None
    assert (login.actor_username, login.actor.username, login.ip) == (
        "carol",
        "carol",
        "198.51.100.4",
    )
    assert len(login.request_id) >= 8
    for event in AuditEvent.objects.all():
        assert "password" not in str(event.details)


# --- tokens ----------------------------------------------------------------------------------


def test_token_create_and_revoke(owner: Any) -> None:
    token, raw = token_create(user=owner, name="ci")
    created = only("token.create")
    assert (created.actor, created.target_type, created.target_id) == (
        owner,
        "apitoken",
        str(token.pk),
    )
    assert created.details == {"name": "ci", "expires_at": None}
    client = logged_in(owner)
    assert client.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 302
    revoked = only("token.revoke")
    assert (revoked.actor, revoked.target_id, revoked.details["name"]) == (
        owner,
        str(token.pk),
        "ci",
    )
    assert revoked.ip == "127.0.0.1"
    for event in AuditEvent.objects.all():
        text = str(event.details)
        assert raw not in text and token.digest not in text and token.hint not in text


def test_a_token_made_through_the_api_is_recorded_with_its_user(owner: Any) -> None:
    api = api_client_for(owner)
    response = api.post("/api/v1/tokens/", {"name": "laptop"}, format="json")
    assert response.status_code == 201, response.content
    event = AuditEvent.objects.get(action="token.create", details__name="laptop")
    assert event.actor == owner and event.ip == "127.0.0.1"
    assert response.json()["token"] not in str(event.details)


# --- members and invitations -----------------------------------------------------------------


def test_member_add_role_remove_through_the_api(project: Project, owner: Any) -> None:
    dave = UserFactory(username="dave")
    api = api_client_for(owner)
    base = f"/api/v1/projects/{project.slug}/members/"
    response = api.post(base, {"username": "dave", "role": "member"}, format="json")
    assert response.status_code == 201, response.content
    membership = Membership.objects.get(project=project, user=dave)
    added = only("member.add")
    assert (added.actor, added.project, added.project_slug) == (owner, project, project.slug)
    assert (added.target_type, added.target_id) == ("membership", str(membership.pk))
    assert added.details == {"user": "dave", "role": "member"}
    assert (
        api.patch(f"{base}{membership.pk}/", {"role": "manager"}, format="json").status_code == 200
    )
    role = only("member.role")
    assert (role.actor, role.details) == (
        owner,
        {"user": "dave", "role": "manager", "was": "member"},
    )
    assert api.delete(f"{base}{membership.pk}/").status_code == 204
    removed = only("member.remove")
    assert (removed.actor, removed.target_id, removed.details["user"]) == (
        owner,
        str(membership.pk),
        "dave",
    )


def test_invitation_create_and_revoke(project: Project, owner: Any, mailoutbox: Any) -> None:
    access = project_access(user=owner, slug=project.slug)
    invitation = invitations.invitation_create(
        access=access, by=owner, email="new@example.com", role=Role.MEMBER
    )
    created = only("invitation.create")
    assert (created.actor, created.project, created.target_id) == (
        owner,
        project,
        str(invitation.pk),
    )
    assert created.details == {"email": "new@example.com", "role": "member"}
    raw_link = mailoutbox[0].body
    in_request(owner, lambda: invitations.invitation_revoke(access=access, invitation=invitation))
    revoked = only("invitation.revoke")
    assert (revoked.actor, revoked.ip, revoked.request_id) == (
        owner,
        "203.0.113.7",
        "req-0123456789",
    )
    for event in AuditEvent.objects.all():
        assert invitation.digest not in str(event.details)
        assert "/invite/" not in str(event.details) and str(event.details) not in raw_link


def test_inviting_an_existing_accounts_address_adds_nobody(
    project: Project, owner: Any, mailoutbox: Any
) -> None:
    """Issue 25: the account joins when it opens the link and confirms (invitation.accept,
    tests/controlpanel/audit/test_audit_accounts.py), not when it is invited."""
    UserFactory(username="erin", email="erin@example.com")
    access = project_access(user=owner, slug=project.slug)
    invitations.invitation_create(access=access, by=owner, email="erin@example.com", role="manager")
    created = only("invitation.create")
    assert created.details == {"email": "erin@example.com", "role": "manager"}
    assert not AuditEvent.objects.filter(action="member.add").exists()


# --- workloads -------------------------------------------------------------------------------


def test_a_job_started_stopped_run_again_and_deleted(
    project: Project, owner: Any, settings: Any
) -> None:
    settings.COMPUTE_BACKEND = "kubernetes"  # a custom image (nothing runs: tasks wait on commit)
    job = submit(project, owner, name="train-7")
    started = only("workload.start")
    assert (started.actor, started.project, started.target_type) == (owner, project, "job")
    assert (started.target_id, started.details) == (str(job.pk), {"name": "train-7"})
    job_stop(access=access_for(project), user=owner, job=job)
    stopped = only("workload.stop")
    assert (stopped.actor, stopped.target_id, stopped.details) == (
        owner,
        str(job.pk),
        {"name": "train-7", "reason": ""},
    )
    job = Job.objects.get(pk=job.pk)
    job_rerun(access=access_for(project), user=owner, job=job)
    again = AuditEvent.objects.filter(action="workload.start").first()
    assert again is not None and again.details == {"name": "train-7", "run": 2}
    job = Job.objects.get(pk=job.pk)
    job_stop(access=access_for(project), user=owner, job=job)
    job_delete(access=access_for(project), user=owner, job=Job.objects.get(pk=job.pk))
    deleted = only("workload.delete")
    assert (deleted.actor, deleted.target_id, deleted.details) == (
        owner,
        str(job.pk),
        {"name": "train-7"},
    )


def test_a_notebook_started_stopped_and_deleted(project: Project, owner: Any) -> None:
    data = {"name": "explore", "flavor": "ai1-1-cpu", "image": "python"}
    notebook = notebook_create(access=access_for(project), user=owner, data=data)
    started = only("workload.start")
    assert (started.target_type, started.target_id) == ("notebook", str(notebook.pk))
    notebook_stop(access=access_for(project), user=owner, notebook=notebook)
    assert only("workload.stop").details == {"name": "explore", "reason": ""}
    notebook_delete(
        access=access_for(project), user=owner, notebook=Notebook.objects.get(pk=notebook.pk)
    )
    deleted = only("workload.delete")
    assert (deleted.actor, deleted.project_slug, deleted.target_id) == (
        owner,
        project.slug,
        str(notebook.pk),
    )


def test_an_app_stopped_started_and_deleted(project: Project, owner: Any) -> None:
    app = App.objects.create(
        project=project,
        owner=owner,
        name="chat",
        image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": "chat"},
        volumes=["b@LOCAL/m:/workspace/model:ro"],
        state="RUNNING",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )
    app_stop(access=access_for(project), user=owner, app=app)
    assert (only("workload.stop").target_type, only("workload.stop").target_id) == (
        "app",
        str(app.pk),
    )
    app_start(access=access_for(project), user=owner, app=App.objects.get(pk=app.pk))
    assert only("workload.start").details == {"name": "chat", "run": 2}
    app_stop(access=access_for(project), user=owner, app=App.objects.get(pk=app.pk))
    app_delete(access=access_for(project), user=owner, app=App.objects.get(pk=app.pk))
    deleted = only("workload.delete")
    assert (deleted.actor, deleted.project, deleted.target_id) == (owner, project, str(app.pk))


# --- billing ---------------------------------------------------------------------------------


def test_budget_price_and_periods(project: Project, owner: Any, admin_user: Any) -> None:
    access = project_access(user=owner, slug=project.slug)
    in_request(
        owner, lambda: budgets.budget_set(access=access, amount="120.50", stops_running=True)
    )
    budget = only("budget.set")
    assert (budget.actor, budget.project, budget.target_type) == (owner, project, "project")
    assert budget.details == {"amount": "120.50", "stops_running": True}

    flavor = Flavor.objects.get(name="ai1-1-cpu")
    valid_from = timezone.now() + timedelta(days=40)
    version, _ = in_request(
        admin_user,
        lambda: price_add(flavor=flavor, valid_from=valid_from, price_per_hour=Decimal("2.5")),
    )
    price = only("price.add")
    assert (price.actor, price.project, price.target_type) == (admin_user, None, "flavorprice")
    assert price.target_id == str(version.pk)
    assert price.details == {
        "flavor": "ai1-1-cpu",
        "valid_from": str(valid_from),
        "price_per_hour": "2.5",
    }

    month = date(2025, 1, 1)
    now = datetime(2025, 3, 1, tzinfo=UTC)
    period_close(month=month, by=admin_user, now=now)
    closed = only("period.close")
    assert (closed.actor, closed.target_type, closed.details) == (
        admin_user,
        "period",
        {"month": "2025-01"},
    )
    in_request(admin_user, lambda: period_reopen(month=month))
    assert only("period.reopen").actor == admin_user
    period_close(month=month, by=admin_user, now=now)
    period_lock(month=month, by=admin_user, now=now)
    assert (only("period.lock").actor, only("period.lock").details) == (
        admin_user,
        {"month": "2025-01"},
    )


# --- people ----------------------------------------------------------------------------------


def test_deactivating_a_user(admin_user: Any, member: Any) -> None:
    people.user_deactivate(by=admin_user, user=member)
    event = only("user.deactivate")
    assert (event.actor, event.target_type, event.target_id) == (admin_user, "user", str(member.pk))
    assert event.details == {"username": member.username}


# --- the record function ---------------------------------------------------------------------


def test_record_drops_secrets_and_refuses_a_bad_action(owner: Any) -> None:
    event = audit.record(
        "token.create",
        actor=owner,
        target=("apitoken", 5),
        name="x",
        token="ajt_secret",
        webhook_secret="s",
        password="p",
        value="v",
    )
    assert event.details == {"name": "x"}
    with pytest.raises(ValueError, match="short dotted name"):
        audit.record("Login", actor=owner)
    with pytest.raises(ValueError):
        audit.record("auth.login; drop", actor=owner)


def test_an_action_rolled_back_leaves_no_event(project: Project, owner: Any) -> None:
    access = project_access(user=owner, slug=project.slug)
    with pytest.raises(Exception):  # noqa: B017 - the budget's own refusal
        budgets.budget_set(access=access, amount="-3", stops_running=False)
    assert not AuditEvent.objects.exists()


# --- append-only -----------------------------------------------------------------------------


def test_the_log_refuses_updates_and_deletes(owner: Any) -> None:
    event = audit.record("auth.login", actor=owner)
    event.action = "auth.logout"
    with pytest.raises(AppendOnlyError):
        event.save()
    with pytest.raises(AppendOnlyError):
        event.delete()
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.filter(pk=event.pk).update(action="x.y")
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.all().delete()
    with pytest.raises(AppendOnlyError), transaction.atomic():
        AuditEvent.objects.bulk_update([event], ["action"])
    assert AuditEvent.objects.get().action == "auth.login"


def test_deleting_a_user_or_a_project_keeps_their_events(owner: Any, project: Project) -> None:
    audit.record("budget.set", actor=owner, project=project, amount="1")
    slug, username = project.slug, owner.username
    project.delete()
    owner.delete()
    event = AuditEvent.objects.get()
    assert (event.actor_username, event.project_slug) == (username, slug)


def test_the_django_admin_is_read_only(admin_user: Any, owner: Any) -> None:
    event = audit.record("auth.login", actor=owner)
    model_admin = admin_site._registry[AuditEvent]
    request = RequestFactory().get("/admin/")
    request.user = admin_user
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, event)
    assert not model_admin.has_delete_permission(request, event)
    client = logged_in(admin_user)
    assert client.get("/admin/audit/auditevent/").status_code == 200
    assert client.get(f"/admin/audit/auditevent/{event.pk}/change/").status_code == 200
    assert client.post(f"/admin/audit/auditevent/{event.pk}/delete/").status_code == 403


# --- the admins' page ------------------------------------------------------------------------


@pytest.fixture
def events(owner: Any, member: Any, project: Project, other_project: Project) -> list[AuditEvent]:
    made = [
        audit.record("auth.login", actor=owner),
        audit.record("token.create", actor=owner, name="<script>alert(1)</script>"),
        audit.record("member.add", actor=owner, project=project, user="bob", role="member"),
        audit.record("workload.start", actor=member, project=project, name="=cmd()"),
        audit.record("workload.stop", actor=member, project=other_project, name="w"),
    ]
    return made


def csv_rows(client: Client, query: str) -> list[list[str]]:
    response = client.get(f"/audit/csv/?{query}")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    text = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    return list(csv.reader(io.StringIO(text)))


def page_ids(client: Client, query: str) -> list[int]:
    response = client.get(f"/audit/?{query}")
    assert response.status_code == 200
    return [e.pk for e in response.context["page"]]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", [4, 3, 2, 1, 0]),
        ("action=workload.", [4, 3]),
        ("action=token.create", [1]),
        ("user=MEMBER-NAME", [4, 3]),
        ("project=PROJECT", [3, 2]),
        ("action=workload.&project=PROJECT", [3]),
        ("from=TODAY&to=TODAY", [4, 3, 2, 1, 0]),
        ("to=YESTERDAY", []),
        ("from=TOMORROW", []),
    ],
)
def test_the_page_and_its_csv_show_the_same_filtered_rows(
    admin_user: Any,
    member: Any,
    project: Project,
    events: list[AuditEvent],
    query: str,
    expected: list[int],
) -> None:
    today = timezone.now().date()
    query = (
        query.replace("MEMBER-NAME", member.username)
        .replace("PROJECT", project.slug)
        .replace("YESTERDAY", str(today - timedelta(days=1)))
        .replace("TOMORROW", str(today + timedelta(days=1)))
        .replace("TODAY", str(today))
    )
    client = logged_in(admin_user)  # itself an auth.login event, of the admin
    mine = {e.pk for e in events}
    shown = page_ids(client, query)
    assert [pk for pk in shown if pk in mine] == [events[n].pk for n in expected]
    # the CSV holds exactly the page's rows, in the same order
    rows = csv_rows(client, query)
    assert rows[0] == list(CSV_COLUMNS)
    assert rows[1:] == [
        csv_row(e) for e in AuditEvent.objects.filter(pk__in=shown).order_by("-at", "-id")
    ]
    assert len(rows) - 1 == len(shown)


def test_the_csv_quotes_formulas_and_the_page_escapes(
    admin_user: Any, events: list[AuditEvent]
) -> None:
    client = logged_in(admin_user)
    rows = csv_rows(client, "action=workload.start")
    assert rows[1][6] == '{"name": "=cmd()"}'
    assert csv_rows(client, "action=workload.start")[1][1] == "workload.start"
    page = client.get("/audit/?action=token.").content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_page_is_paginated_newest_first(admin_user: Any, owner: Any) -> None:
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(action="auth.login", actor=owner, actor_username=owner.username)
            for _ in range(120)
        ]
    )
    client = logged_in(admin_user)
    first = client.get("/audit/?action=auth.login&user=" + owner.username)
    page = first.context["page"]
    assert (len(page.object_list), page.paginator.num_pages) == (50, 3)
    assert "page=2" in first.content.decode() and "action=auth.login" in first.content.decode()
    ids = [e.pk for e in page] + [
        e.pk
        for e in client.get(f"/audit/?action=auth.login&user={owner.username}&page=2").context[
            "page"
        ]
    ]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 100


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("from=2026-13-01", "from: '2026-13-01' is not a date such as 2026-01-31."),
        ("to=yesterday", "to: 'yesterday' is not a date such as 2026-01-31."),
        ("from=2026-02-01&to=2026-01-01", "to: the end date is before the start date."),
        ("action=AUTH%3Cb%3E", "action: use the start of an action name"),
    ],
)
def test_bad_filters_are_a_400_naming_them(
    admin_user: Any, events: Any, query: str, message: str
) -> None:
    client = logged_in(admin_user)
    page = client.get(f"/audit/?{query}")
    assert page.status_code == 400
    assert message.replace("'", "&#x27;") in page.content.decode()
    answer = client.get(f"/audit/csv/?{query}")
    assert answer.status_code == 400
    assert message in answer.content.decode()


def test_only_site_admins_see_the_log(owner: Any, admin_user: Any) -> None:
    for path in ("/audit/", "/audit/csv/"):
        anonymous = Client().get(path)
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
        assert logged_in(owner).get(path).status_code == 404
        assert logged_in(admin_user).get(path).status_code == 200
    assert 'href="/audit/"' in logged_in(admin_user).get("/people/").content.decode()
    assert 'href="/audit/"' not in logged_in(owner).get("/settings/").content.decode()
