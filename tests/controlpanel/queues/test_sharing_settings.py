"""How a project shares GPUs in Kueue's cohort, on the project's settings page (issue 28): its
borrowing and lending limits and fair-sharing weight, site admins only, checked (nothing is
written when one value is bad) and audited; at the service and through the page."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from controlpanel.audit.models import AuditEvent
from controlpanel.projects.access import ProjectAccess, project_access
from controlpanel.projects.models import Project
from controlpanel.queues.models import ProjectQueue
from controlpanel.queues.services import project_queue_update
from tests.fixtures.panel import api_client_for, logged_in

pytestmark = pytest.mark.django_db
URL = "/p/alpha/settings/"


@pytest.fixture
def quota4(project: Project) -> Project:
    Project.objects.filter(pk=project.pk).update(gpu_quota=4)
    project.refresh_from_db()
    return project


def access(project: Project, user: Any) -> ProjectAccess:
    return project_access(user=user, slug=project.slug)


def sharing_events() -> list[dict[str, Any]]:
    return [e.details for e in AuditEvent.objects.filter(action="project.sharing").order_by("pk")]


def test_a_site_admin_sets_the_limits_and_weight_and_each_change_is_audited(
    quota4: Project, admin_user: Any
) -> None:
    changes = {"borrowing_limit": 2, "lending_limit": "3", "fair_sharing_weight": 5}
    changed = project_queue_update(access=access(quota4, admin_user), changes=changes)
    assert changed == {
        "borrowing_limit": (None, 2),
        "lending_limit": (None, 3),
        "fair_sharing_weight": (1, 5),
    }
    row = ProjectQueue.objects.get(project=quota4)
    assert (row.borrowing_limit, row.lending_limit, row.fair_sharing_weight) == (2, 3, 5)
    assert sharing_events() == [
        {
            "borrowing_limit": "no limit → 2",
            "lending_limit": "no limit → 3",
            "fair_sharing_weight": "1 → 5",
        }
    ]
    # Empty is no limit again; the same values change nothing and write no event.
    again = {"borrowing_limit": None, "lending_limit": 3, "fair_sharing_weight": 5}
    assert project_queue_update(access=access(quota4, admin_user), changes=again) == {
        "borrowing_limit": (2, None)
    }
    assert project_queue_update(access=access(quota4, admin_user), changes=again) == {}
    assert len(sharing_events()) == 2


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"lending_limit": 5}, "lending_limit", "lends at most its own GPU quota (4)"),
        ({"fair_sharing_weight": 0}, "fair_sharing_weight", "from 1 to 1000"),
        ({"fair_sharing_weight": None}, "fair_sharing_weight", "from 1 to 1000"),
        ({"borrowing_limit": -1}, "borrowing_limit", "0 or more"),
        ({"borrowing_limit": "two"}, "borrowing_limit", "'two' is not a whole number"),
        ({"borrowing_limit": True}, "borrowing_limit", "Give a whole number"),
        ({"gpu_quota": 9}, "gpu_quota", "is no sharing setting"),
    ],
)
def test_a_bad_value_is_refused_by_name_and_nothing_is_written(
    quota4: Project, admin_user: Any, changes: dict[str, Any], field: str, message: str
) -> None:
    good = {"borrowing_limit": 1}
    with pytest.raises(ValidationError) as refused:
        project_queue_update(access=access(quota4, admin_user), changes=good | changes)
    assert list(refused.value.message_dict) == [field]
    assert message in " ".join(refused.value.message_dict[field])
    assert not ProjectQueue.objects.exists() and sharing_events() == []


def test_a_project_manager_may_not_change_the_sharing(quota4: Project, owner: Any) -> None:
    with pytest.raises(PermissionDenied, match="Only site admins"):
        project_queue_update(access=access(quota4, owner), changes={"borrowing_limit": 8})
    assert not ProjectQueue.objects.exists()


def test_the_settings_page_edits_the_sharing_for_site_admins_only(
    quota4: Project, admin_user: Any, owner: Any
) -> None:
    admin = logged_in(admin_user)
    page = admin.get(URL).content.decode()
    assert 'data-testid="sharing-form"' in page
    assert "QUEUE_ENGINE=builtin" in page  # says the fields wait for Kueue
    saved = admin.post(
        URL,
        {
            "action": "sharing-save",
            "borrowing_limit": "2",
            "lending_limit": "",
            "fair_sharing_weight": "3",
        },
    )
    assert saved.status_code == 302
    row = ProjectQueue.objects.get(project=quota4)
    assert (row.borrowing_limit, row.lending_limit, row.fair_sharing_weight) == (2, None, 3)
    shown = admin.get(URL).content.decode()
    assert "GPU sharing saved: GPU borrowing limit, Fair sharing weight." in shown
    assert 'name="borrowing_limit" value="2"' in shown

    refused = admin.post(
        URL,
        {
            "action": "sharing-save",
            "borrowing_limit": "1",
            "lending_limit": "7",
            "fair_sharing_weight": "3",
        },
    )
    assert refused.status_code == 400
    assert "A project lends at most its own GPU quota (4); empty lends all." in (
        refused.content.decode()
    )
    hostile = admin.post(
        URL, {"action": "sharing-save", "fair_sharing_weight": "<b>x</b>", "lending_limit": ""}
    )
    assert hostile.status_code == 400 and "<b>x</b>" not in hostile.content.decode()
    row.refresh_from_db()
    assert (row.borrowing_limit, row.lending_limit) == (2, None)

    manager_page = logged_in(owner).get(URL).content.decode()
    assert 'data-testid="sharing-form"' not in manager_page
    forged = logged_in(owner).post(URL, {"action": "sharing-save", "borrowing_limit": "9"})
    assert forged.status_code == 403
    row.refresh_from_db()
    assert row.borrowing_limit == 2
    assert len(sharing_events()) == 1


def test_the_api_changes_the_sharing_with_the_settings_for_site_admins_only(
    quota4: Project, admin_user: Any, owner_api: Any
) -> None:
    api = api_client_for(admin_user)
    answer = api.patch(
        "/api/v1/projects/alpha/",
        {"borrowing_limit": 2, "lending_limit": None, "notebook_idle_minutes": 30},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["sharing"] == {
        "borrowing_limit": 2,
        "lending_limit": None,
        "fair_sharing_weight": 1,
    }
    assert answer.json()["notebook_idle_minutes"] == 30
    # A bad sharing value changes nothing, the other settings of the request included.
    refused = api.patch(
        "/api/v1/projects/alpha/",
        {"lending_limit": 5, "notebook_idle_minutes": 45},
        format="json",
    )
    assert refused.status_code == 400
    assert "at most its own GPU quota (4)" in str(refused.json()["lending_limit"])
    quota4.refresh_from_db()
    assert quota4.notebook_idle_minutes == 30
    # A manager may change the idle limit, not the sharing: 403 and nothing changes.
    forged = owner_api.patch(
        "/api/v1/projects/alpha/",
        {"borrowing_limit": 9, "notebook_idle_minutes": 50},
        format="json",
    )
    assert forged.status_code == 403 and "Only site admins" in forged.json()["detail"]
    quota4.refresh_from_db()
    assert quota4.notebook_idle_minutes == 30
    row = ProjectQueue.objects.get(project=quota4)
    assert (row.borrowing_limit, row.lending_limit) == (2, None)
    assert len(sharing_events()) == 1
