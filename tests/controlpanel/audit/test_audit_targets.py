"""What the audit log missed (issue 32) and how its page reads: project creation and the edits
made in Django's admin are recorded; a target reads as the object's name, linked to its page
where the viewer may open it and plain text otherwise; an empty detail is not shown."""

from __future__ import annotations

import re
from typing import Any

from django.forms.models import model_to_dict
from django.test import Client
from django.urls import reverse

from controlpanel.audit import record
from controlpanel.audit.models import AuditEvent
from controlpanel.buckets.models import Bucket
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from tests.fixtures.panel import UserFactory, api_client_for, logged_in


def _events(prefix: str) -> list[tuple[str, str, str, str, dict[str, Any]]]:
    rows = AuditEvent.objects.filter(action__startswith=prefix).order_by("pk")
    return [(e.action, e.actor_username, e.project_slug, e.target_type, e.details) for e in rows]


def test_project_creation_is_audited_from_the_page_and_the_api(admin_user: Any) -> None:
    made = logged_in(admin_user).post(
        "/projects/new/",
        {
            "name": "Vision",
            "slug": "vision",
            "gpu_quota": 2,
            "cpu_quota": 8,
            "memory_gib_quota": 32,
            "pod_quota": 4,
            "storage_gib_quota": 0,
            "monthly_budget": "0",
            "notebook_idle_minutes": 60,
        },
    )
    assert made.status_code == 302
    answer = api_client_for(admin_user).post(
        "/api/v1/projects/", {"slug": "speech", "name": "Speech"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    assert _events("project.") == [
        ("project.create", "admin", "vision", "project", {"slug": "vision", "name": "Vision"}),
        ("project.create", "admin", "speech", "project", {"slug": "speech", "name": "Speech"}),
    ]


def _project_form(project: Project, shown: str) -> dict[str, Any]:
    """The admin's change form as posted, its inlines (whichever the page has) left as none."""
    skip = {"id", "webhook_secret", "members"}
    data = {k: v for k, v in model_to_dict(project).items() if v is not None and k not in skip}
    management = {"TOTAL_FORMS": "0", "INITIAL_FORMS": "0", "MIN_NUM_FORMS": "0"}
    management["MAX_NUM_FORMS"] = "1000"
    for prefix in set(re.findall(r'name="([\w-]+)-TOTAL_FORMS"', shown)):
        data |= {f"{prefix}-{k}": v for k, v in management.items()}
    return data


def test_the_django_admins_edits_are_audited(admin_user: Any, project: Project) -> None:
    client = logged_in(admin_user)
    url = f"/admin/projects/project/{project.pk}/change/"
    shown = client.get(url).content.decode()  # the creation time as the form shows it
    when = dict(re.findall(r'name="((?:initial-)?created_at_[01])" value="([^"]*)"', shown))
    changed = client.post(url, _project_form(project, shown) | when | {"gpu_quota": "32"})
    assert changed.status_code == 302, changed.content.decode()[:3000]
    project.refresh_from_db()
    assert project.gpu_quota == 32
    one, two = (
        Flavor.objects.create(name=n, vcpu_per_unit=1, memory_gib_per_unit=4)
        for n in ("gone-a", "gone-b")
    )
    bulk = client.post(
        "/admin/flavors/flavor/",
        {"action": "delete_selected", "_selected_action": [one.pk, two.pk], "post": "yes"},
    )
    assert bulk.status_code == 302 and not Flavor.objects.filter(name__startswith="gone").exists()
    events = _events("admin.")
    assert events[0][:4] == ("admin.change", "admin", "alpha", "project")
    assert events[0][4] == {"object": "Alpha", "change": "Changed GPU quota."}
    # several deletions at once: Django writes its own log with bulk_create, no signal
    assert sorted(e[4]["object"] for e in events[1:]) == ["gone-a", "gone-b"]
    assert {e[:4] for e in events[1:]} == {("admin.delete", "admin", "", "flavor")}


def _job(project: Project, owner: Any) -> Job:
    return Job.objects.create(
        project=project,
        owner=owner,
        name="train-7",
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )


def test_targets_read_as_names_linked_to_their_pages(
    admin_user: Any, owner: Any, project: Project
) -> None:
    kept = Bucket.objects.create(project=project, datastore="LOCAL", name="kept-bucket")
    record("bucket.create", actor=owner, project=project, target=kept, name="kept-bucket")
    job = _job(project, owner)
    record("workload.stop", actor=owner, project=project, target=job, name=job.name, reason="")
    bucket = Bucket.objects.create(project=project, datastore="LOCAL", name="gone-bucket")
    record("bucket.delete", actor=owner, project=project, target=bucket, name="gone-bucket")
    bucket_id = bucket.pk
    bucket.delete()
    page = logged_in(admin_user).get("/audit/").content.decode()
    # newest first: the admin's log-in (no target), the bucket, the job, the kept bucket
    cells = re.findall(r'data-testid="audit-target">(.*?)</td>', page)
    browse = reverse(
        "bucket-browse", kwargs={"slug": "alpha", "datastore": "LOCAL", "name": "kept-bucket"}
    )
    assert cells[3] == f'<a href="{browse}">bucket kept-bucket@LOCAL</a>'
    assert cells[2] == (
        f'<a href="/p/alpha/jobs/{job.pk}/" title="{job.pk}">job train-7 ({job.pk.hex[:8]})</a>'
    )
    assert cells[1] == f'<span title="{bucket_id}">bucket gone-bucket (deleted)</span>'
    assert str(job.pk) not in re.sub(r'(href|title)="[^"]*"', "", page)  # no raw UUID shown
    assert '<a href="/p/alpha/">alpha</a>' in page
    assert "reason=" not in page and "name=train-7" in page  # the empty reason is left out
    assert 'href="/people/' in page  # the actor's page


def test_a_link_only_where_the_viewer_may_open_the_page(
    admin_user: Any, owner: Any, project: Project
) -> None:
    """A staff account without the Django admin's view permission on flavors reads the flavor
    edited there as text; a superuser gets the admin's page."""
    flavor = Flavor.objects.create(name="edited", vcpu_per_unit=1, memory_gib_per_unit=4)
    record("admin.change", actor=admin_user, target=flavor, object="edited", change="x")
    change_page = f'href="/admin/flavors/flavor/{flavor.pk}/change/"'
    assert change_page in logged_in(admin_user).get("/audit/").content.decode()
    staff = UserFactory(username="auditor", is_staff=True)
    seen: Client = logged_in(staff)
    page = seen.get("/audit/").content.decode()
    assert "flavor edited" in page and change_page not in page
