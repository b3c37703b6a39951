"""Leaving stops one's work (issue 25): a member removed from a project, or an account
deactivated, runs nothing more there. Their notebook stops, their app stops serving, a job
they queued never launches; what others own, and (for a removal) what they own in other
projects, goes on. Through the services the members and people pages call."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.accounts.people import user_deactivate
from controlpanel.engine.models import Workload
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.models import Notebook
from controlpanel.projects.models import Membership, Project
from controlpanel.projects.services import member_remove
from controlpanel.served.models import App
from tests.fixtures.jobs import access_for
from tests.fixtures.panel import UserFactory, add_member, logged_in

pytestmark = pytest.mark.django_db


def notebook(project: Project, owner: Any, name: str) -> Notebook:
    """A running notebook the backend was given (launched)."""
    return Notebook.objects.create(
        project=project, owner=owner, name=name, image="local", editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"), state="RUNNING", run=1, launched_run=1,
    )  # fmt: skip


def queued_app(project: Project, owner: Any) -> App:
    """An app waiting for admission: never handed to the backend."""
    return App.objects.create(
        project=project, owner=owner, name="chat", image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": "chat", "public": False},
        volumes=["b@LOCAL/m:/workspace/model:ro"], state="QUEUED", run=1, launched_run=0,
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )  # fmt: skip


def states(*rows: Workload) -> list[tuple[str, bool, str]]:
    found = {w.pk: w for w in Workload.objects.filter(pk__in=[r.pk for r in rows])}
    return [(found[r.pk].state, found[r.pk].stop_requested, found[r.pk].state_reason) for r in rows]


def test_a_removed_member_s_work_in_that_project_stops(
    project: Project, other_project: Project, owner: Any, member: Any
) -> None:
    add_member(other_project, member)
    theirs, app = notebook(project, member, "theirs"), queued_app(project, member)
    elsewhere, colleagues = (
        notebook(other_project, member, "elsewhere"),
        notebook(project, owner, "colleagues"),
    )
    # The members page says so before the click.
    page = logged_in(owner).get("/p/alpha/members/").content.decode()
    assert "Everything they run or queued in it stops" in page
    membership = Membership.objects.get(project=project, user=member)
    member_remove(access=access_for(project), membership=membership)
    said = f"stopped: {member.username} left the project"
    assert states(theirs, app) == [
        ("STOPPING", True, said),
        ("STOPPED", True, f"{said} before it started"),  # the queued app never launches
    ]
    assert states(elsewhere, colleagues) == [("RUNNING", False, ""), ("RUNNING", False, "")]


def test_a_deactivated_account_s_work_stops_everywhere(
    project: Project, other_project: Project, owner: Any, member: Any
) -> None:
    add_member(other_project, member)
    admin = UserFactory(username="admin-2", is_staff=True)
    mine = [notebook(project, member, "a"), notebook(other_project, member, "b")]
    app = queued_app(project, member)
    colleagues = notebook(project, owner, "colleagues")
    user_deactivate(by=admin, user=member)
    said = f"stopped: {member.username}'s account was deactivated"
    assert states(*mine, app) == [
        ("STOPPING", True, said),
        ("STOPPING", True, said),
        ("STOPPED", True, f"{said} before it started"),
    ]
    assert states(colleagues) == [("RUNNING", False, "")]
    assert Membership.objects.filter(user=member).count() == 2  # memberships are kept
