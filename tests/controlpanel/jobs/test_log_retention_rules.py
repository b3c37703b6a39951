"""Second tests of issue 26's rules, each seen from another side than test_curve_rows.py and
test_log_archive.py: the curve halving as the job page draws it after the collector's commits,
the archive read back through the API and the retention's cutoff at its day, and a failed run's
workspace date on the page and its deletion on either side of that date."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any

from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.engine import curves, logarchive, workspaces
from controlpanel.engine.logs import _commit
from controlpanel.engine.models import JobLogLine, LogArchive
from controlpanel.engine.tasks import retention
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy.types import LogChunk
from storage import objects
from storage.datastore import DatastoreConfig


def job_of(project: Project, owner: Any, **fields: Any) -> Job:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    return Job.objects.create(
        project=project, owner=owner, name="j", image="x", flavor=flavor, **fields
    )


def test_the_job_page_draws_the_halved_curve_the_old_list_held(
    project: Project, owner: Any, owner_client: Client
) -> None:
    """4,700 progress lines committed by the collector in chunks of 470 (three halvings): the
    chart's steps are what the JSON list kept, every other point from the first."""
    job = job_of(project, owner, state=JobState.RUNNING)
    kept: list[int] = []
    cursor = ""
    for chunk in range(10):
        steps = range(chunk * 470 + 1, chunk * 470 + 471)
        lines = tuple(
            json.dumps({"event": "progress", "v": 1, "step": s, "loss": 3 - s / 10_000})
            for s in steps
        )
        assert _commit(job.pk, 1, cursor, LogChunk(lines=lines, cursor=f"c{chunk}")) == 470
        cursor = f"c{chunk}"
        for step in steps:
            kept.append(step)
            if len(kept) > curves.MAX_CURVE_POINTS:
                kept = kept[::2]
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    series = re.search(r'data-series="([^"]+)" data-kind="loss"', page)
    assert series is not None
    drawn = json.loads(html.unescape(series.group(1)))["steps"]
    assert drawn == kept and len(drawn) < 2_000 and drawn[-1] == 4_700
    assert kept[:3] == [1, 9, 17]  # three halvings, each from the first point


def archived_job(project: Project, owner: Any, lines: list[str], days_ago: float) -> Job:
    job = job_of(
        project, owner, state=JobState.DONE, finished_at=timezone.now(), logs_archived=True,
        log_lines=len(lines),
    )  # fmt: skip
    JobLogLine.objects.bulk_create(
        [JobLogLine(job=job, run=1, seq=n, text=t) for n, t in enumerate(lines, start=1)]
    )
    assert logarchive.move_to_store(job_id=job.pk, run=1) is not None
    LogArchive.objects.filter(job=job).update(archived_at=timezone.now() - timedelta(days=days_ago))
    return job


def api_lines(api: APIClient, job: Job, after: int = 0) -> list[str]:
    answer = api.get(f"/api/v1/jobs/{job.pk}/logs/?project=alpha&after={after}")
    assert answer.status_code == 200, answer.content
    return [line["text"] for line in answer.json()["lines"]]


def test_the_retention_keeps_an_archive_to_its_day_and_the_api_reads_the_object(
    panel_s3: DatastoreConfig, project: Project, owner: Any, owner_api: APIClient, settings: Any
) -> None:
    settings.LOG_ARCHIVE_RETENTION_DAYS = 30
    young_lines = [f"young {n} <i>" for n in range(1, 301)]
    young = archived_job(project, owner, young_lines, days_ago=29.9)
    old = archived_job(project, owner, ["old 1", "old 2"], days_ago=30.1)
    assert not JobLogLine.objects.exists()  # both read from their objects from now on
    logarchive._cache.clear()
    assert api_lines(owner_api, young, after=250) == young_lines[250:]
    assert retention()["logs_deleted"] == 1
    gone, kept = LogArchive.objects.get(job=old), LogArchive.objects.get(job=young)
    assert gone.deleted_at is not None and kept.deleted_at is None
    assert objects.object_exists(panel_s3, bucket=kept.bucket, key=kept.key)
    assert not objects.object_exists(panel_s3, bucket=gone.bucket, key=gone.key)
    logarchive._cache.clear()
    assert api_lines(owner_api, young) == young_lines
    [said] = api_lines(owner_api, old)
    assert "this log was deleted on" in said and "kept 30 days" in said
    # 0 keeps archives forever.
    settings.LOG_ARCHIVE_RETENTION_DAYS = 0
    LogArchive.objects.filter(job=young).update(archived_at=timezone.now() - timedelta(days=900))
    assert retention()["logs_deleted"] == 0
    assert objects.object_exists(panel_s3, bucket=kept.bucket, key=kept.key)


def failed_run(project: Project, owner: Any, hours_ago: float) -> Job:
    now = timezone.now()
    return job_of(
        project, owner, state=JobState.SYNC_FAILED, launched_run=1,
        admitted_at=now - timedelta(hours=hours_ago + 1),
        finished_at=now - timedelta(hours=hours_ago),
        volumes=["bkt@LOCAL/out:/workspace/output:rw"],
    )  # fmt: skip


def test_a_workspace_is_kept_to_the_hour_the_setting_names(
    project: Project, owner: Any, owner_client: Client, settings: Any
) -> None:
    """With WORKSPACE_KEPT_DAYS=3 a run that ended 71 hours ago keeps its claim (and the page
    names its date, 3 days after its end); one that ended 73 hours ago loses it."""
    settings.WORKSPACE_KEPT_DAYS = 3
    inside, past = failed_run(project, owner, 71), failed_run(project, owner, 73)
    until = inside.finished_at + timedelta(days=3)  # type: ignore[operator]
    assert workspaces.kept_until(inside) == until
    page = owner_client.get(f"/p/alpha/jobs/{inside.pk}/").content.decode()
    assert f"workspace kept until {until:%Y-%m-%d %H:%M}" in page
    assert retention()["workspaces_deleted"] == 1
    inside.refresh_from_db()
    past.refresh_from_db()
    assert inside.workspace_deleted_at is None and past.workspace_deleted_at is not None
    assert retention()["workspaces_deleted"] == 0  # once
