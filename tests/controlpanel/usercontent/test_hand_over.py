"""Handing a leaver's work over (issue 25): when a manager (or a site admin) removes a member,
the members page offers to hand what they own in the project (jobs, notebooks, apps) to
another member instead of stopping it. The new owner then acts on it (stops it, opens the
notebook); the leaver reaches none of it; it is audited. A plain member cannot; a target who is
not an active member, or the leaver, is refused and nothing changes. Page and API."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.audit.models import AuditEvent
from controlpanel.engine.models import Workload
from controlpanel.notebooks.models import Notebook
from controlpanel.projects.models import Membership, Project
from controlpanel.sweeps.models import Sweep
from controlpanel.usercontent.domain import parse_content_domain
from tests.controlpanel.usercontent.test_leavers import notebook, queued_app
from tests.fixtures.jobs import submit
from tests.fixtures.panel import UserFactory, add_member, api_client_for, logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def heir(project: Project) -> Any:
    user = UserFactory(username="heir")
    add_member(project, user)
    return user


@pytest.fixture
def work(project: Project, member: Any, settings: Any) -> list[Workload]:
    """The leaver's (`member`'s): a running notebook, a queued app, a queued job."""
    settings.COMPUTE_BACKEND = "kubernetes"  # rows only: the job's image is a cluster's
    job = submit(project, member)
    settings.USER_CONTENT_DOMAIN = parse_content_domain("localhost:8000")
    settings.COMPUTE_BACKEND = "local"
    nb = notebook(project, member, "theirs")
    Notebook.objects.filter(pk=nb.pk).update(url="http://127.0.0.1:9/?token=t")
    return [nb, queued_app(project, member), job]


@pytest.fixture
def sweep(project: Project, member: Any, work: list[Workload]) -> Sweep:
    """The leaver's running sweep (its trials are their jobs)."""
    return Sweep.objects.create(
        project=project, owner=member, name="lr", base={"name": "lr"},
        space={"learning_rate": {"values": [1e-4, 1e-3]}}, sampler="grid", max_trials=2,
        parallel=1,
    )  # fmt: skip


def owners(rows: list[Workload]) -> list[str]:
    return [Workload.objects.get(pk=w.pk).owner.username for w in rows]


def remove(client: Any, project: Project, leaver: Any, heir: str) -> Any:
    membership = Membership.objects.get(project=project, user=leaver)
    return client.post(
        f"/p/alpha/members/{membership.pk}/",
        {"action": "remove", "hand_over_to": heir},
        follow=True,
    )


def test_the_page_offers_it_and_the_heir_takes_the_work_over(
    project: Project, owner: Any, member: Any, heir: Any, work: list[Workload], sweep: Sweep
) -> None:
    manager = logged_in(owner)
    page = manager.get("/p/alpha/members/").content.decode()
    assert "Hand over member's 1 job, 1 notebook, 1 app, 1 sweep to:" in page
    assert '<option value="heir">heir</option>' in page
    answer = remove(manager, project, member, "heir")
    assert "Removed member. Their 1 job, 1 notebook, 1 app now belong to heir." in (
        answer.content.decode()
    )
    assert owners(work) == ["heir", "heir", "heir"]
    kept = Sweep.objects.get(pk=sweep.pk)
    assert (kept.owner, kept.state) == (heir, "RUNNING")  # its next trials are the heir's
    nb = Workload.objects.get(pk=work[0].pk)
    assert (nb.state, nb.stop_requested) == ("RUNNING", False)  # kept, not stopped
    event = AuditEvent.objects.get(action="member.hand_over")
    assert event.actor == owner and event.details["leaver"] == "member"
    assert event.details["to"] == "heir"
    assert event.details["what"] == "1 job, 1 notebook, 1 app, 1 sweep"
    # The heir opens the notebook and stops it; the leaver reaches nothing.
    theirs = logged_in(heir)
    assert theirs.get(f"/p/alpha/notebooks/{nb.pk}/open/").status_code == 302
    stopped = api_client_for(heir).post(f"/api/v1/notebooks/{nb.pk}/stop/?project=alpha")
    assert stopped.status_code == 200, stopped.content
    leaver = api_client_for(member)
    assert leaver.post(f"/api/v1/apps/{work[1].pk}/stop/?project=alpha").status_code == 404
    assert logged_in(member).get(f"/p/alpha/notebooks/{nb.pk}/open/").status_code == 404


@pytest.mark.parametrize(
    ("who", "allowed"),
    [("plain member", False), ("manager", True), ("site admin", True)],
)
def test_who_may_hand_work_over(
    project: Project,
    owner: Any,
    member: Any,
    heir: Any,
    work: list[Workload],
    who: str,
    allowed: bool,
) -> None:
    actor = {
        "plain member": heir,
        "manager": owner,
        "site admin": UserFactory(username="site-admin", is_staff=True),
    }[who]
    answer = remove(logged_in(actor), project, member, "heir")
    still = Membership.objects.filter(project=project, user=member).exists()
    if allowed:
        assert answer.status_code == 200 and not still
        assert owners(work) == ["heir"] * 3
    else:
        assert answer.status_code in (403, 404) and still
        assert owners(work) == ["member"] * 3
        assert not AuditEvent.objects.filter(action="member.hand_over").exists()


def test_a_heir_who_is_no_active_member_or_the_leaver_is_refused_and_nothing_changes(
    project: Project, other_project: Project, owner: Any, member: Any, outsider: Any,
    work: list[Workload],
) -> None:  # fmt: skip
    gone = UserFactory(username="gone", is_active=False)
    add_member(project, gone)
    manager = logged_in(owner)
    for name, why in (
        ("outsider", "outsider is not an active member of Alpha."),
        ("gone", "gone is not an active member of Alpha."),
        ("nobody-at-all", "nobody-at-all is not an active member of Alpha."),
        ("member", "Hand the work over to someone who stays."),
    ):
        answer = remove(manager, project, member, name)
        assert why in answer.content.decode()
        assert Membership.objects.filter(project=project, user=member).exists()
        assert owners(work) == ["member"] * 3
    nb = Workload.objects.get(pk=work[0].pk)
    assert (nb.state, nb.stop_requested) == ("RUNNING", False)  # nothing stopped either
    assert not AuditEvent.objects.filter(action__in=["member.hand_over", "member.remove"]).exists()


def test_the_api_hands_over_too_and_says_why_not(
    project: Project, owner: Any, member: Any, heir: Any, outsider: Any, work: list[Workload]
) -> None:
    """`outsider` manages another project: not a member of this one."""
    membership = Membership.objects.get(project=project, user=member)
    url = f"/api/v1/projects/alpha/members/{membership.pk}/"
    manager = api_client_for(owner)
    refused = manager.delete(f"{url}?hand_over_to=outsider")
    assert refused.status_code == 400
    assert refused.json() == {"hand_over_to": ["outsider is not an active member of Alpha."]}
    assert owners(work) == ["member"] * 3
    assert api_client_for(heir).delete(f"{url}?hand_over_to=heir").status_code in (403, 404)
    assert manager.delete(f"{url}?hand_over_to=heir").status_code == 204
    assert owners(work) == ["heir"] * 3
    assert not Membership.objects.filter(pk=membership.pk).exists()
