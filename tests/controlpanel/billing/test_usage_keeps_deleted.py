"""The ledger keeps who ran a workload and what it was called after the workload is deleted:
the usage page and `/api/v1/usage/` still name the person and the workload (issue 32)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.test import Client
from rest_framework.test import APIClient

from controlpanel.billing.admin_selectors import project_runs, project_users, project_workloads
from controlpanel.billing.models import KeptRun
from controlpanel.engine.models import Workload
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from tests.controlpanel.billing.test_usage_team import cells, results

JAN = date(2025, 1, 1)


def _delete_train(january: dict[str, Workload]) -> str:
    train = january["train-a"]
    Job.objects.get(pk=train.pk).delete()  # as its kind's proxy: what the services delete
    assert not Workload.objects.filter(pk=train.pk).exists()
    return str(train.pk)


def test_the_api_names_a_deleted_workload_and_its_owner(
    january: dict[str, Workload], owner_api: APIClient
) -> None:
    train = _delete_train(january)
    rows = results(owner_api.get("/api/v1/usage/?month=2025-01"))
    gone = [row for row in rows if row["workload"] == train]
    assert [(r["user"], r["workload_name"], r["kind"], r["minutes"]) for r in gone] == [
        ("owner", "train-a", "job", 31)
    ]
    # its filters still find it: by the person, and by the workload's id
    owned = results(owner_api.get("/api/v1/usage/?month=2025-01&user=owner"))
    assert sorted(r["workload_name"] for r in owned) == ["prep", "train-a"]
    by_id = results(owner_api.get(f"/api/v1/usage/?month=2025-01&workload={train}"))
    assert [r["workload_name"] for r in by_id] == ["train-a"]


def test_the_usage_page_names_a_deleted_workload_and_its_owner(
    january: dict[str, Workload], owner_client: Client
) -> None:
    train = _delete_train(january)
    body = owner_client.get("/p/alpha/usage/?month=2025-01").content.decode()
    assert "owner 91 1.03 3.4933" in cells(body, "usage-by-user")  # unchanged by the delete
    workloads = cells(body, "usage-by-workload")
    assert "train-a (deleted) job 31 1.03 2.8933" in workloads
    assert f"/jobs/{train}/" not in body  # no link to a page that is gone


def test_a_deleted_projects_runs_keep_nothing(
    january: dict[str, Workload], owner_client: Client
) -> None:
    """Deleting the project takes its runs, and what was kept of them, with it."""
    _delete_train(january)
    assert KeptRun.objects.count() == 1
    january["prep"].project.delete()
    assert KeptRun.objects.count() == 0


def test_the_admins_drill_down_names_a_deleted_workload_with_a_badge(
    january: dict[str, Workload], admin_client: Client
) -> None:
    """Its row in the workloads table, and its run in the runs table, by the name, kind and
    owner its deletion kept, each marked "deleted"; its link still finds its runs; the CSV
    names it too (issue 32: it was one "(deleted)" row with no person)."""
    train = _delete_train(january)
    body = admin_client.get("/billing/2025-01/p/alpha/").content.decode()
    workloads = cells(body, "table-workloads")
    assert "train-a deleted job owner 1 " in workloads
    assert "(deleted)" not in workloads
    assert 'train-a</a> <span class="badge badge-muted">deleted</span>' in body
    runs = cells(body, "table-runs")
    assert "train-a #1 · pod-trai deleted owner" in runs and "(deleted)" not in runs
    filtered = admin_client.get(f"/billing/2025-01/p/alpha/?workload={train}").content.decode()
    assert "train-a #1 · pod-trai deleted owner" in cells(filtered, "table-runs")
    streamed = admin_client.get("/billing/2025-01/p/alpha/workloads.csv").streaming_content
    csv = b"".join(streamed).decode()  # type: ignore[arg-type]
    assert "train-a,job,owner,1," in csv


def _users(project: Project) -> list[tuple[str | None, int, int, Decimal]]:
    rows = project_users(month=JAN, project=project)
    return [(r["user"], r["workloads"], r["runs"], r["usage"].amount) for r in rows]


def test_the_drill_downs_reads_give_a_deleted_workload_to_its_kept_owner(
    january: dict[str, Workload], project: Project
) -> None:
    """The users' rows are the same before and after a deletion (its lines go to the owner
    KeptRun names, no "(workload deleted)" row); under `user`, the workloads and runs read
    the deleted workload's (issue 32: they left it out), and not another person's."""
    before = _users(project)
    assert before == [("owner", 2, 2, Decimal("3.49")), ("member", 1, 1, Decimal("0.47"))]
    _delete_train(january)
    assert _users(project) == before
    mine = project_workloads(month=JAN, project=project, user="owner")
    assert [(r["name"], r["user"], r.get("deleted", False)) for r in mine] == [
        ("train-a", "owner", True),
        ("prep", "owner", False),
    ]
    runs = list(project_runs(month=JAN, project=project, user="owner"))
    assert sorted((r["name"] or r["kept_name"], r["kept_user"]) for r in runs) == [
        ("prep", None),
        ("train-a", "owner"),
    ]
    theirs = project_workloads(month=JAN, project=project, user="member")
    assert theirs.count() == 1 and [r["name"] for r in theirs] == ["nb-b"]
    assert [r["name"] for r in project_runs(month=JAN, project=project, user="member")] == ["nb-b"]


def test_a_deletion_from_before_keptrun_stays_a_row_of_no_one(
    january: dict[str, Workload], project: Project, admin_client: Client
) -> None:
    """A workload deleted before KeptRun existed kept no owner: its lines stay one row."""
    _delete_train(january)
    KeptRun.objects.all().delete()
    assert _users(project) == [
        (None, 0, 1, Decimal("2.89")),
        ("owner", 1, 1, Decimal("0.60")),
        ("member", 1, 1, Decimal("0.47")),
    ]
    body = admin_client.get("/billing/2025-01/p/alpha/").content.decode()
    assert "(workload deleted)" in cells(body, "table-users")
    assert project_workloads(month=JAN, project=project, user="owner").count() == 1


def test_the_admins_drill_down_filtered_by_user_shows_their_deleted_workload(
    january: dict[str, Workload], admin_client: Client
) -> None:
    """The users table names the deleted workload's owner (no "(workload deleted)" row), and
    `?user=` shows its row and its run, badged, on the page and in the CSVs."""
    _delete_train(january)
    body = admin_client.get("/billing/2025-01/p/alpha/").content.decode()
    users = cells(body, "table-users")
    assert "(workload deleted)" not in users and "owner 2 2 " in users
    mine = admin_client.get("/billing/2025-01/p/alpha/?user=owner").content.decode()
    workloads = cells(mine, "table-workloads")
    assert "train-a deleted job owner 1 " in workloads and "prep job owner 1 " in workloads
    assert "nb-b" not in workloads
    runs = cells(mine, "table-runs")
    assert "train-a #1 · pod-trai deleted owner" in runs and "prep" in runs
    theirs = admin_client.get("/billing/2025-01/p/alpha/?user=member").content.decode()
    assert "train-a" not in cells(theirs, "table-workloads") + cells(theirs, "table-runs")
    for table in ("workloads", "runs"):
        url = f"/billing/2025-01/p/alpha/{table}.csv?user=owner"
        streamed = admin_client.get(url).streaming_content
        assert "train-a" in b"".join(streamed).decode()  # type: ignore[arg-type]
