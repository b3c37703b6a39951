"""A deleted workload's archived logs leave the store too (engine/logarchive.py, issue 26), on
the real S3 test server: the delete lists the objects with its commit, a task deletes them after
it, and a store that is down at the delete gets them deleted by the retention once it is back.
Deleting through the service, the page, the API and a project's delete all do it; a rolled back
delete lists nothing; a lost message's deletion is done by the retention; a poll of an archived
run answers from the object."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.celery import app
from controlpanel.engine import logarchive, services, tasks
from controlpanel.engine.models import JobLogLine, LogArchive, LogObjectDeletion, Workload
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.access import ProjectAccess
from controlpanel.projects.models import Project
from storage import objects
from storage.datastore import DatastoreConfig

DEAD = "http://127.0.0.1:9"  # nothing listens: the store is down


def archived_job(project: Project, owner: Any, runs: int = 2) -> tuple[Job, list[LogArchive]]:
    """An ended job whose `runs` runs' logs are in the store (three lines each)."""
    flavor = Flavor.objects.get(name="h100-1-gpu")
    job = Job.objects.create(
        project=project, owner=owner, name="j", image="x", flavor=flavor, run=runs,
        state=JobState.DONE, finished_at=timezone.now(), logs_archived=True, log_lines=3,
    )  # fmt: skip
    JobLogLine.objects.bulk_create(
        JobLogLine(job=job, run=run, seq=seq, text=f"run {run} line {seq}")
        for run in range(1, runs + 1)
        for seq in (1, 2, 3)
    )
    archives = [logarchive.move_to_store(job_id=job.pk, run=run) for run in range(1, runs + 1)]
    assert all(archives) and not JobLogLine.objects.filter(job=job).exists()
    return job, archives  # type: ignore[return-value]


def stored(s3: DatastoreConfig, archives: list[LogArchive]) -> list[bool]:
    return [objects.object_exists(s3, bucket=a.bucket, key=a.key) for a in archives]


@contextmanager
def worker(capture: Any) -> Iterator[None]:
    """What the delete sends after its commit runs here, as a worker would run it."""
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        with capture(execute=True):
            yield
    finally:
        app.conf.task_always_eager = eager


def test_the_service_delete_lists_the_objects_and_the_task_after_commit_deletes_them(
    panel_s3: DatastoreConfig, project: Project, owner: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    job, archives = archived_job(project, owner)
    kept, kept_archives = archived_job(project, owner)
    access = ProjectAccess(project=project, role="manager", is_admin=False)
    with django_capture_on_commit_callbacks() as sent:
        services.workload_delete(access=access, user=owner, workload=job)
    # Committed: the rows are gone, the objects listed, still there until the task runs.
    assert not LogArchive.objects.filter(job_id=job.pk).exists()
    assert sorted(LogObjectDeletion.objects.values_list("key", flat=True)) == sorted(
        a.key for a in archives
    )
    assert stored(panel_s3, archives) == [True, True] and sent
    ids = list(LogObjectDeletion.objects.values_list("pk", flat=True))
    assert tasks.log_objects_delete(ids) == 2
    assert stored(panel_s3, archives) == [False, False]
    assert not LogObjectDeletion.objects.exists()
    assert stored(panel_s3, kept_archives) == [True, True]  # another job's logs stay
    assert Workload.objects.filter(pk=kept.pk).exists()


def test_deleting_through_the_page_and_the_api_deletes_the_objects(
    panel_s3: DatastoreConfig, project: Project, owner: Any, owner_client: Client,
    owner_api: APIClient, outsider_api: APIClient, django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    by_page, page_archives = archived_job(project, owner)
    by_api, api_archives = archived_job(project, owner, runs=1)
    with worker(django_capture_on_commit_callbacks):
        answer = owner_client.post(f"/p/alpha/jobs/{by_page.pk}/delete/")
    assert answer.status_code == 302
    assert stored(panel_s3, page_archives) == [False, False]
    assert stored(panel_s3, api_archives) == [True]
    # Another project's user cannot delete it, and its log stays.
    with worker(django_capture_on_commit_callbacks):
        assert outsider_api.delete(f"/api/v1/jobs/{by_api.pk}/?project=alpha").status_code in (
            403,
            404,
        )
    assert stored(panel_s3, api_archives) == [True]
    with worker(django_capture_on_commit_callbacks):
        assert owner_api.delete(f"/api/v1/jobs/{by_api.pk}/?project=alpha").status_code == 204
    assert stored(panel_s3, api_archives) == [False]
    assert not LogObjectDeletion.objects.exists()


def test_a_store_down_at_the_delete_loses_no_deletion(
    panel_s3: DatastoreConfig, project: Project, owner: Any, owner_api: APIClient,
    settings: Any, django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    job, archives = archived_job(project, owner)
    settings.S3_ENDPOINT_URL = DEAD
    with django_capture_on_commit_callbacks(execute=False):
        assert owner_api.delete(f"/api/v1/jobs/{job.pk}/?project=alpha").status_code == 204
    ids = list(LogObjectDeletion.objects.values_list("pk", flat=True))
    assert len(ids) == 2
    with pytest.raises(Exception, match="2 log objects not deleted yet"):
        tasks.log_objects_delete.run(ids)  # the worker retries it
    first = LogObjectDeletion.objects.order_by("requested_at", "pk").first()
    assert first is not None and first.attempts == 1 and first.last_error
    assert tasks.retention()["deleted_logs_purged"] == 0  # still down: still listed
    assert LogObjectDeletion.objects.count() == 2
    settings.S3_ENDPOINT_URL = panel_s3.endpoint_url  # back up
    assert stored(panel_s3, archives) == [True, True]
    assert tasks.retention()["deleted_logs_purged"] == 2
    assert stored(panel_s3, archives) == [False, False]
    assert not LogObjectDeletion.objects.exists()
    assert tasks.retention()["deleted_logs_purged"] == 0  # once


def test_a_store_down_keeps_every_listed_object_until_the_task_is_retried(
    panel_s3: DatastoreConfig, project: Project, owner: Any, settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    job, archives = archived_job(project, owner, runs=3)
    access = ProjectAccess(project=project, role="manager", is_admin=False)
    settings.S3_ENDPOINT_URL = DEAD
    with django_capture_on_commit_callbacks(execute=False):
        services.workload_delete(access=access, user=owner, workload=job)
    ids = list(LogObjectDeletion.objects.values_list("pk", flat=True))
    assert logarchive.purge(ids) == (0, 3)  # stops at the first failure, all still listed
    assert LogObjectDeletion.objects.count() == 3
    settings.S3_ENDPOINT_URL = panel_s3.endpoint_url
    assert stored(panel_s3, archives) == [True, True, True]
    assert tasks.log_objects_delete(ids) == 3  # the worker's retry
    assert stored(panel_s3, archives) == [False, False, False]
    assert not LogObjectDeletion.objects.exists()


def test_a_projects_delete_lists_its_logs_and_a_rolled_back_delete_none(
    panel_s3: DatastoreConfig, project: Project, owner: Any, settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    settings.LOG_ARCHIVE_RETENTION_DAYS = 30
    job, archives = archived_job(project, owner)
    # Run 1's archive was already deleted by the retention: nothing more to delete for it.
    LogArchive.objects.filter(pk=archives[0].pk).update(deleted_at=timezone.now())
    with pytest.raises(RuntimeError), transaction.atomic():
        Project.objects.get(pk=project.pk).delete()
        raise RuntimeError("the delete fails after the cascade")
    assert not LogObjectDeletion.objects.exists()
    assert LogArchive.objects.filter(job_id=job.pk).count() == 2
    with django_capture_on_commit_callbacks(execute=False):  # its message is lost
        Project.objects.get(pk=project.pk).delete()  # what the admin's delete does
    assert not LogArchive.objects.exists() and LogObjectDeletion.objects.count() == 1
    assert stored(panel_s3, archives[1:]) == [True]
    assert tasks.retention()["deleted_logs_purged"] == 1  # the retention deletes it
    assert stored(panel_s3, archives[1:]) == [False] and not LogObjectDeletion.objects.exists()


@pytest.mark.parametrize("by", ["finalize", "retention"])
def test_a_job_deleted_while_its_log_is_written_leaves_no_object(
    panel_s3: DatastoreConfig, project: Project, owner: Any, monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any, by: str,
) -> None:  # fmt: skip
    """The object is written, then the job's delete commits before the archive's row: the
    object is listed and deleted (whether job_finalize or the retention moved the log)."""
    flavor = Flavor.objects.get(name="h100-1-gpu")
    job = Job.objects.create(
        project=project, owner=owner, name="j", image="x", flavor=flavor,
        state=JobState.DONE, logs_archived=True, log_lines=1,
    )  # fmt: skip
    JobLogLine.objects.create(job=job, run=1, seq=1, text="only")
    put = objects.put_object

    def put_then_deleted(*args: Any, **kwargs: Any) -> None:
        put(*args, **kwargs)
        Workload.objects.filter(pk=job.pk).delete()  # the delete commits meanwhile

    monkeypatch.setattr(logarchive.objects, "put_object", put_then_deleted)
    with worker(django_capture_on_commit_callbacks):
        if by == "finalize":
            assert logarchive.move_to_store(job_id=job.pk, run=1) is None
        else:
            assert logarchive.move_pending() == 0
    key = logarchive.object_key(job, 1)
    assert not objects.object_exists(panel_s3, bucket="ajuste-logs", key=key)
    assert not LogArchive.objects.exists() and not LogObjectDeletion.objects.exists()


def test_a_poll_of_an_archived_run_answers_from_the_object(
    panel_s3: DatastoreConfig, project: Project, owner: Any, owner_client: Client
) -> None:
    """An ended log does not grow: a poll at its end gets the end of the log (not a 204 that
    keeps it polling), a poll inside it the lines after, read from the object."""
    job, _archives = archived_job(project, owner)
    htmx = {"HTTP_HX_REQUEST": "true"}
    at_end = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/?run=2&after=3", **htmx)
    assert at_end.status_code == 200 and 'data-testid="log-end"' in at_end.content.decode()
    inside = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/?run=2&after=1", **htmx)
    assert inside.status_code == 200
    assert "run 2 line 2" in inside.content.decode() and "run 2 line 3" in inside.content.decode()
    earlier = owner_client.get(f"/p/alpha/jobs/{job.pk}/logs/?run=1&after=2", **htmx)
    assert earlier.status_code == 200 and "run 1 line 3" in earlier.content.decode()
    assert "run 1 line 2" not in earlier.content.decode()
