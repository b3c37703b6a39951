"""Deactivating an account can hand its work over (issue 25), as removing a member does: on the
person's page a site admin picks, per project where they own work, an active member of that
project to take it (or nobody: it stops). The service (accounts/people.user_deactivate) reuses
the removal's hand-over (engine/leavers.py); every heir is checked before anything changes.
Service and page."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from controlpanel.accounts.models import ApiToken
from controlpanel.accounts.people import user_deactivate
from controlpanel.audit.models import AuditEvent
from controlpanel.engine.models import Workload
from controlpanel.projects.models import Project
from controlpanel.sweeps.models import Sweep
from tests.controlpanel.usercontent import test_hand_over as removal
from tests.controlpanel.usercontent.test_hand_over import owners
from tests.controlpanel.usercontent.test_leavers import notebook as make_notebook
from tests.fixtures.panel import UserFactory, add_member, api_client_for, logged_in

pytestmark = pytest.mark.django_db
# The removal tests' fixtures: `member`'s running notebook, queued app and queued job in Alpha,
# their sweep there, and `heir`, an active member of Alpha.
work, sweep, heir = removal.work, removal.sweep, removal.heir
SAID = "stopped: member's account was deactivated"


@pytest.fixture
def admin() -> Any:
    return UserFactory(username="site-admin", is_staff=True)


@pytest.fixture
def elsewhere(other_project: Project, member: Any, work: list[Workload]) -> Workload:
    """The leaver's running notebook in Beta too."""
    add_member(other_project, member)
    return make_notebook(other_project, member, "in-beta")


def state(row: Workload) -> tuple[str, str, bool]:
    row = Workload.objects.get(pk=row.pk)
    return row.owner.username, row.state, row.stop_requested


def nothing_changed(member: Any, work: list[Workload], sweep: Sweep, elsewhere: Workload) -> None:
    member.refresh_from_db()
    assert member.is_active
    assert ApiToken.objects.filter(user=member, revoked_at=None).count() == 1
    assert owners([*work, elsewhere]) == ["member"] * 4
    assert not any(Workload.objects.get(pk=w.pk).stop_requested for w in [*work, elsewhere])
    assert Sweep.objects.get(pk=sweep.pk).owner == member
    assert not AuditEvent.objects.filter(
        action__in=["user.deactivate", "member.hand_over"]
    ).exists()


def test_the_service_hands_one_project_over_and_stops_the_rest(
    project: Project, other_project: Project, admin: Any, member: Any, heir: Any,
    work: list[Workload], sweep: Sweep, elsewhere: Workload,
) -> None:  # fmt: skip
    handed = user_deactivate(
        by=admin, user=member, hand_over={project.pk: "heir", other_project.pk: ""}
    )
    assert [(h.project, h.heir, h.what) for h in handed] == [
        (project, heir, "1 job, 1 notebook, 1 app, 1 sweep")
    ]
    member.refresh_from_db()
    assert not member.is_active
    nb, app, job = work
    assert state(nb) == ("heir", "RUNNING", False)  # kept running, now the heir's
    assert state(app)[::2] == ("heir", False) and state(job)[::2] == ("heir", False)
    assert Sweep.objects.get(pk=sweep.pk).owner == heir
    assert state(elsewhere) == ("member", "STOPPING", True)  # nobody chosen in Beta: it stops
    assert Workload.objects.get(pk=elsewhere.pk).state_reason == SAID
    event = AuditEvent.objects.get(action="member.hand_over")
    assert (event.actor, event.project) == (admin, project)
    assert (event.details["leaver"], event.details["to"]) == ("member", "heir")
    deactivated = AuditEvent.objects.get(action="user.deactivate")
    assert deactivated.details["handed_over"] == ["alpha: heir"]
    # The heir acts on it; the leaver reaches nothing.
    assert logged_in(heir).get(f"/p/alpha/notebooks/{nb.pk}/open/").status_code == 302
    stopped = api_client_for(heir).post(f"/api/v1/notebooks/{nb.pk}/stop/?project=alpha")
    assert stopped.status_code == 200, stopped.content


def test_the_service_refuses_a_heir_who_is_no_active_member_there_and_changes_nothing(
    project: Project, other_project: Project, admin: Any, member: Any, heir: Any,
    outsider: Any, work: list[Workload], sweep: Sweep, elsewhere: Workload,
) -> None:  # fmt: skip
    api_client_for(member)  # a token, which a refused deactivation must not revoke
    gone = UserFactory(username="gone", is_active=False)
    add_member(project, gone)
    refusals = [
        ({project.pk: "outsider"}, "outsider is not an active member of Alpha."),
        ({other_project.pk: "heir"}, "heir is not an active member of Beta."),
        ({project.pk: "gone"}, "gone is not an active member of Alpha."),
        ({project.pk: "member"}, "Hand the work over to someone who stays."),
        ({project.pk: "heir", 99999: "heir"}, "No such project."),
        # A good heir in one project does not carry a bad one in another.
        ({project.pk: "heir", other_project.pk: "nobody-at-all"}, "is not an active member"),
    ]
    for hand_over, said in refusals:
        with pytest.raises(ValidationError) as refused:
            user_deactivate(by=admin, user=member, hand_over=hand_over)
        assert said in " ".join(refused.value.messages)
        nothing_changed(member, work, sweep, elsewhere)


def people_page(user: Any, person: Any) -> Any:
    return logged_in(user).get(f"/people/{person.pk}/")


def deactivate(user: Any, person: Any, **heirs: str) -> Any:
    data = {"action": "deactivate", **heirs}
    return logged_in(user).post(f"/people/{person.pk}/", data, follow=True)


def test_the_page_offers_an_heir_per_project_and_says_what_went_where(
    project: Project, other_project: Project, admin: Any, member: Any, heir: Any,
    owner: Any, outsider: Any, work: list[Workload], sweep: Sweep, elsewhere: Workload,
) -> None:  # fmt: skip
    hostile = '<img src=x onerror="alert(1)">'
    add_member(project, UserFactory(username=hostile))
    add_member(project, UserFactory(username="gone", is_active=False))
    page = people_page(admin, member).content.decode()
    alpha = page.split('data-testid="hand-over-alpha"', 1)[1].split("</label>", 1)[0]
    assert "Hand over member's 1 job, 1 notebook, 1 app, 1 sweep in Alpha to:" in alpha
    assert f'name="hand_over_to_{project.pk}" form="person-actions"' in alpha
    assert alpha.count("<option") == 4  # nobody, and Alpha's active members but the leaver
    for name in ("heir", "owner", "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"):
        assert f'<option value="{name}">{name}</option>' in alpha
    assert "gone" not in alpha and hostile not in page
    beta = page.split('data-testid="hand-over-beta"', 1)[1].split("</label>", 1)[0]
    assert "1 notebook in Beta to:" in beta and '<option value="outsider">' in beta
    assert "except what you hand over under “When deactivated” below" in page

    answer = deactivate(
        admin,
        member,
        **{f"hand_over_to_{project.pk}": "heir", f"hand_over_to_{other_project.pk}": ""},
    )
    said = answer.content.decode()
    assert "member is deactivated" in said
    assert "Their 1 job, 1 notebook, 1 app, 1 sweep in Alpha now belong to heir." in said
    assert owners(work) == ["heir"] * 3 and state(work[0]) == ("heir", "RUNNING", False)
    assert state(elsewhere) == ("member", "STOPPING", True)
    assert 'data-testid="deactivate-hand-over"' not in said  # nothing left to hand over
    assert AuditEvent.objects.get(action="member.hand_over").actor == admin


def test_the_page_refuses_a_bad_heir_or_a_non_admin_and_changes_nothing(
    project: Project, other_project: Project, admin: Any, member: Any, heir: Any,
    owner: Any, outsider: Any, work: list[Workload], sweep: Sweep, elsewhere: Workload,
) -> None:  # fmt: skip
    api_client_for(member)
    answer = deactivate(admin, member, **{f"hand_over_to_{project.pk}": "outsider"})
    assert "outsider is not an active member of Alpha." in answer.content.decode()
    nothing_changed(member, work, sweep, elsewhere)
    answer = deactivate(admin, member, **{"hand_over_to_alpha": "heir"})
    assert "No such project." in answer.content.decode()
    nothing_changed(member, work, sweep, elsewhere)
    hostile = deactivate(admin, member, **{f"hand_over_to_{project.pk}": "<b>x</b>"})
    assert "&lt;b&gt;x&lt;/b&gt; is not an active member of Alpha." in hostile.content.decode()
    nothing_changed(member, work, sweep, elsewhere)
    # A project's manager (no site admin) neither sees the page nor deactivates through it.
    assert people_page(owner, member).status_code == 404
    refused = deactivate(owner, member, **{f"hand_over_to_{project.pk}": "owner"})
    assert refused.status_code == 404
    nothing_changed(member, work, sweep, elsewhere)
