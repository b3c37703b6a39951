"""A project's settings (issue 32): `PATCH /api/v1/projects/<slug>/` and the settings page.
Managers change the notebook idle limit, the budget and the job webhook; site admins the
quotas too. A quota asked by a manager is refused naming the field, a bad value likewise, and
nothing changes then; every change is audited with the old and new values."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from rest_framework.test import APIClient

from controlpanel.audit.models import AuditEvent
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project, Role
from controlpanel.projects.services import project_settings_update
from controlpanel.projects.settings_rules import FieldsRefused
from tests.fixtures.panel import api_client_for, logged_in

URL = "/api/v1/projects/alpha/"
PAGE = "/p/alpha/settings/"
HOOK = "https://hooks.example.com/ajuste?team=7"
AS_MADE = {"gpu_quota": 8, "notebook_idle_minutes": 120, "monthly_budget": "0.00"}


def _state(project: Project) -> dict[str, Any]:
    project.refresh_from_db()
    return {
        "gpu_quota": project.gpu_quota,
        "notebook_idle_minutes": project.notebook_idle_minutes,
        "monthly_budget": str(project.monthly_budget),
    }


def _updates() -> list[tuple[str, dict[str, Any]]]:
    rows = AuditEvent.objects.filter(action="project.update").order_by("pk")
    return [(e.actor_username, e.details) for e in rows]


def test_a_manager_changes_idle_limit_budget_and_webhook(
    owner_api: APIClient, project: Project
) -> None:
    body = {
        "notebook_idle_minutes": 30,
        "monthly_budget": "12.50",
        "budget_stops_running": True,
        "webhook_url": HOOK,
    }
    answer = owner_api.patch(URL, body, format="json")
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert (data["notebook_idle_minutes"], data["monthly_budget"]) == (30, "12.50")
    assert data["budget_stops_running"] is True
    project.refresh_from_db()
    assert project.webhook_url == HOOK and data["webhook_secret"] == project.webhook_secret
    assert len(project.webhook_secret) == 43 and "no-store" in answer["Cache-Control"]
    again = owner_api.patch(URL, {"webhook_url": HOOK + "8"}, format="json").json()
    assert again["webhook_secret"] is None  # made once, shown once
    assert _updates() == [
        (
            "owner",
            {
                "notebook_idle_minutes": "120 → 30",
                "monthly_budget": "0.00 → 12.50",
                "budget_stops_running": "False → True",
            },
        )
    ]
    hosts = AuditEvent.objects.filter(action="webhook.set").values_list("details", flat=True)
    assert list(hosts) == [{"host": "hooks.example.com"}] * 2
    assert "webhook" not in owner_api.get(URL).content.decode()  # a GET never shows it


def test_a_manager_asking_for_a_quota_is_refused_by_name(
    owner_api: APIClient, project: Project
) -> None:
    answer = owner_api.patch(URL, {"gpu_quota": 64, "notebook_idle_minutes": 5}, format="json")
    assert answer.status_code == 403
    assert "site admins" in answer.json()["gpu_quota"]
    assert "notebook_idle_minutes" not in answer.json()
    assert _state(project) == AS_MADE and _updates() == []


def test_the_service_refuses_a_managers_quota_too(project: Project, owner: Any) -> None:
    """The rule at the service, below the API and the page: no role but site admin passes."""
    manager = ProjectAccess(project=project, role=Role.MANAGER, is_admin=False)
    with pytest.raises(FieldsRefused) as refused:
        project_settings_update(access=manager, changes={"cpu_quota": 1024})
    assert set(refused.value.fields) == {"cpu_quota"}
    member = ProjectAccess(project=project, role=Role.MEMBER, is_admin=False)
    with pytest.raises(PermissionDenied):
        project_settings_update(access=member, changes={"notebook_idle_minutes": 1})
    project.refresh_from_db()
    assert (project.cpu_quota, project.notebook_idle_minutes) == (256, 120)


def test_a_site_admin_changes_the_quotas(admin_user: Any, project: Project) -> None:
    api = api_client_for(admin_user)
    answer = api.patch(URL, {"gpu_quota": 16, "storage_gib_quota": 0}, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["gpu_quota"], answer.json()["storage_gib_quota"]) == (16, 0)
    assert _updates() == [("admin", {"gpu_quota": "8 → 16", "storage_gib_quota": "2048 → 0"})]


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"notebook_idle_minutes": -1}, "notebook_idle_minutes", "greater than or equal to 0"),
        ({"monthly_budget": "12.345"}, "monthly_budget", "2 decimal places"),
        ({"monthly_budget": "lots"}, "monthly_budget", "valid number"),
        ({"webhook_url": "ftp://files.example.com/"}, "webhook_url", "http:// or https://"),
        ({"webhook_url": "https://10.0.0.1/hook"}, "webhook_url", "10.0.0.1"),
        ({"budget_stops_running": "maybe"}, "budget_stops_running", "valid boolean"),
        ({"slug": "renamed"}, "slug", "slug is not changed here"),
        ({"owner": "me"}, "owner", "'owner' is no setting"),
    ],
)
def test_a_bad_value_is_named_and_nothing_changes(
    owner_api: APIClient, project: Project, body: dict[str, Any], field: str, says: str
) -> None:
    answer = owner_api.patch(URL, {"notebook_idle_minutes": 7, **body}, format="json")
    assert answer.status_code == 400, answer.content
    assert says in str(answer.json()[field]), answer.json()
    assert _state(project) == AS_MADE and _updates() == []


def test_the_service_checks_values_itself(project: Project) -> None:
    """What a form or a serializer let through is checked again where it is written."""
    admin = ProjectAccess(project=project, role=None, is_admin=True)
    with pytest.raises(ValidationError) as bad:
        project_settings_update(
            access=admin,
            changes={"gpu_quota": True, "monthly_budget": "-1", "notebook_idle_minutes": 3},
        )
    assert set(bad.value.message_dict) == {"gpu_quota", "monthly_budget"}
    assert _state(project) == AS_MADE


def test_put_is_not_offered(owner_api: APIClient, project: Project) -> None:
    assert owner_api.put(URL, {"notebook_idle_minutes": 3}, format="json").status_code == 405
    assert _state(project) == AS_MADE


def test_the_settings_page_of_a_manager(owner_client: Client, project: Project) -> None:
    page = owner_client.get(PAGE).content.decode()
    assert 'name="notebook_idle_minutes"' in page and 'name="monthly_budget"' in page
    assert 'name="gpu_quota"' not in page and "Only site admins change a project" in page
    saved = owner_client.post(PAGE, {"notebook_idle_minutes": "45", "monthly_budget": "99"})
    assert saved.status_code == 302 and saved["Location"] == PAGE
    assert _state(project) == AS_MADE | {"notebook_idle_minutes": 45, "monthly_budget": "99.00"}
    forged = owner_client.post(PAGE, {"notebook_idle_minutes": "1", "gpu_quota": "512"})
    assert forged.status_code == 403 and "gpu_quota" in forged.content.decode()
    bad = owner_client.post(PAGE, {"monthly_budget": "-5"})
    assert bad.status_code == 400 and "The budget is 0 (none) or more." in bad.content.decode()
    assert _state(project) == AS_MADE | {"notebook_idle_minutes": 45, "monthly_budget": "99.00"}
    assert [d for _, d in _updates()] == [
        {"notebook_idle_minutes": "120 → 45", "monthly_budget": "0.00 → 99.00"}
    ]


def test_the_settings_page_of_a_site_admin_and_of_a_member(
    admin_user: Any, member: Any, project: Project
) -> None:
    admin = logged_in(admin_user)
    assert 'name="gpu_quota"' in admin.get(PAGE).content.decode()
    assert admin.post(PAGE, {"gpu_quota": "3"}).status_code == 302
    assert _state(project)["gpu_quota"] == 3
    refused = logged_in(member).post(PAGE, {"notebook_idle_minutes": "1"})
    assert refused.status_code == 403 and logged_in(member).get(PAGE).status_code == 403
    assert _state(project)["notebook_idle_minutes"] == 120
