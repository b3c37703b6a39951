"""Each user's settings page: their projects and roles (those given by SSO groups marked),
their tokens, and what their own workloads cost this month (not their colleagues')."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.test import Client
from django.utils import timezone

from controlpanel.accounts.models import GroupGrant, User
from controlpanel.accounts.selectors import user_month_usage
from controlpanel.billing.selectors import current_month
from controlpanel.billing.services import run_record
from controlpanel.engine.models import JobRun
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.fixtures.panel import logged_in


def _ran(project: Project, owner: User, flavor: str, minutes: int, units: int = 1) -> None:
    job = Job.objects.create(
        project=project,
        owner=owner,
        name=f"{owner.username}-{flavor}",
        image="busybox",
        flavor=Flavor.objects.get(name=flavor),
        gpu=units,
        state=JobState.DONE,
    )
    end = timezone.now().replace(second=0, microsecond=0)
    start = max(end - timedelta(minutes=minutes), end.replace(day=1, hour=0, minute=0))
    run = JobRun.objects.create(
        uid=f"uid-{job.pk}",
        job=job,
        project=project,
        run=1,
        flavor=job.flavor,
        units=units,
        started_at=start,
        finished_at=start + timedelta(minutes=minutes),
    )
    run_record(run_id=run.pk)


def test_settings_page_shows_projects_roles_tokens_and_own_usage(
    owner: User, member: User, project: Project, other_project: Project
) -> None:
    from tests.fixtures.panel import add_member

    add_member(other_project, member)
    GroupGrant.objects.create(user=member, project=other_project, role="member", groups=["ml"])
    _ran(project, member, "a100-1-gpu", 60, units=2)  # 2 × 2.75 per hour for an hour
    _ran(project, owner, "a100-1-gpu", 600)  # a colleague's: not on the member's page
    usage = user_month_usage(user=member, month=current_month())
    assert [(u.project.slug, u.minutes, u.amount) for u in usage.projects] == [
        ("alpha", 60, Decimal("5.50"))
    ]
    page = logged_in(member).get("/settings/")
    text = page.content.decode()
    assert page.status_code == 200
    assert "5.50 EUR · 60 min" in text
    assert "Alpha" in text and "Beta" in text and "via ml" in text
    assert "55.00" not in text  # the owner's 10 hours
    owner_page = logged_in(owner).get("/settings/").content.decode()
    assert "27.50 EUR · 600 min" in owner_page


def test_settings_page_needs_a_session(db: Any) -> None:
    assert Client().get("/settings/").status_code == 302
