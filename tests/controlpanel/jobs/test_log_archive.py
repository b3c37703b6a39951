"""Ended logs move to object storage (engine/logarchive.py) on the real S3 test server: the
rows leave PostgreSQL, the page, the API and the download read the object as they read the rows,
the retention deletes old archives (the log then says so), and a failed run's kept workspace
claim expires (engine/workspaces.py)."""

from __future__ import annotations

import gzip
import json
import re
from datetime import timedelta
from typing import Any

from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.engine import logarchive, workspaces
from controlpanel.engine.admission import project_usage
from controlpanel.engine.models import JobLogLine, LogArchive
from controlpanel.engine.tasks import retention
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from storage import objects
from storage.datastore import DatastoreConfig

LINES = [f"line {n} <b>&amp;</b> é" for n in range(1, 1201)]


def ended_job(project: Project, owner: Any, lines: list[str] = LINES, **fields: Any) -> Job:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    ended = {"state": JobState.DONE, "finished_at": timezone.now(), "logs_archived": True}
    job = Job.objects.create(
        project=project, owner=owner, name="j", image="x", flavor=flavor,
        log_lines=len(lines), **(ended | fields),
    )  # fmt: skip
    JobLogLine.objects.bulk_create(
        [JobLogLine(job=job, run=job.run, seq=n, text=t) for n, t in enumerate(lines, start=1)]
    )
    return job


def views_of(client: Client, api: APIClient, job: Job) -> tuple[list[str], str, str]:
    page = api.get(f"/api/v1/jobs/{job.pk}/logs/?project=alpha&after=1190")
    assert page.status_code == 200, page.content
    download = client.get(f"/p/alpha/jobs/{job.pk}/logs/download/")
    assert download.status_code == 200
    page_html = client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    html = "\n".join(
        re.findall(r"line \d+ &lt;b&gt;&amp;amp;&lt;/b&gt; é|this log was deleted on", page_html)
    )
    text = b"".join(download.streaming_content).decode()  # type: ignore[attr-defined]
    return [line["text"] for line in page.json()["lines"]], text, html


def test_an_ended_log_moves_to_the_store_and_reads_the_same(
    panel_s3: DatastoreConfig, project: Project, owner: Any, owner_client: Client,
    owner_api: APIClient,
) -> None:  # fmt: skip
    job = ended_job(project, owner)
    before = views_of(owner_client, owner_api, job)
    assert before[0] == LINES[1190:] and before[1] == "".join(t + "\n" for t in LINES)
    assert "line 1200 " in before[2]
    archive = logarchive.move_to_store(job_id=job.pk, run=1)
    assert archive is not None and archive.lines == 1200
    assert not JobLogLine.objects.filter(job=job).exists()
    data = objects.read_object(panel_s3, bucket=archive.bucket, key=archive.key, max_bytes=10**7)
    assert [json.loads(x) for x in gzip.decompress(data).splitlines()] == LINES
    assert archive.size == len(data) < sum(len(t) for t in LINES) / 3
    logarchive._cache.clear()
    assert views_of(owner_client, owner_api, job) == before  # page, API, download the same
    assert logarchive.move_to_store(job_id=job.pk, run=1) == archive  # once


def test_a_live_log_stays_and_a_pending_one_moves_later(
    panel_s3: DatastoreConfig, project: Project, owner: Any
) -> None:
    live = ended_job(project, owner, logs_archived=False, state=JobState.RUNNING)
    assert logarchive.move_to_store(job_id=live.pk, run=1) is None
    ended = ended_job(project, owner, run=2)  # run 2 ended; run 1's lines still rows
    JobLogLine.objects.create(job=ended, run=1, seq=1, text="first run")
    assert retention()["logs_moved"] == 2  # both of `ended`'s runs, not the live one
    assert JobLogLine.objects.filter(job=live).count() == len(LINES)
    assert set(LogArchive.objects.values_list("job_id", "run")) == {(ended.pk, 1), (ended.pk, 2)}
    assert logarchive.lines_of(LogArchive.objects.get(job=ended, run=1)) == ["first run"]


def test_retention_deletes_old_archives_and_the_log_says_so(
    panel_s3: DatastoreConfig, project: Project, owner: Any, owner_client: Client,
    owner_api: APIClient, settings: Any,
) -> None:  # fmt: skip
    settings.LOG_ARCHIVE_RETENTION_DAYS = 30
    old, new = ended_job(project, owner), ended_job(project, owner)
    for job in (old, new):
        logarchive.move_to_store(job_id=job.pk, run=1)
    LogArchive.objects.filter(job=old).update(archived_at=timezone.now() - timedelta(days=31))
    LogArchive.objects.filter(job=new).update(archived_at=timezone.now() - timedelta(days=29))
    assert logarchive.expire() == 1
    gone = LogArchive.objects.get(job=old)
    assert gone.deleted_at is not None
    assert not objects.object_exists(panel_s3, bucket=gone.bucket, key=gone.key)
    _lines, text, html = views_of(owner_client, owner_api, old)
    assert "this log was deleted on" in text and "kept 30 days" in text
    assert "this log was deleted on" in html
    assert views_of(owner_client, owner_api, new)[0] == LINES[1190:]


def failed_push(project: Project, owner: Any, days_ago: float) -> Job:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    now = timezone.now()
    return Job.objects.create(
        project=project, owner=owner, name="p", image="x", flavor=flavor,
        state=JobState.SYNC_FAILED, admitted_at=now - timedelta(days=days_ago, hours=1),
        finished_at=now - timedelta(days=days_ago), launched_run=1,
        volumes=["bkt@LOCAL/out:/workspace/output:rw"],
    )  # fmt: skip


def test_a_failed_runs_workspace_is_kept_until_a_date_then_deleted(
    project: Project, owner: Any, owner_client: Client, settings: Any
) -> None:
    settings.WORKSPACE_KEPT_DAYS = 7
    recent, old = failed_push(project, owner, 6.5), failed_push(project, owner, 8)
    until = workspaces.kept_until(recent)
    assert until == recent.finished_at + timedelta(days=7)  # type: ignore[operator]
    page = owner_client.get(f"/p/alpha/jobs/{recent.pk}/").content.decode()
    assert f"workspace kept until {until:%Y-%m-%d %H:%M}" in page
    held = project_usage(project=project).storage_gib
    assert retention()["workspaces_deleted"] == 1
    old.refresh_from_db()
    assert old.workspace_deleted_at is not None and workspaces.kept_until(old) is None
    assert project_usage(project=project).storage_gib < held  # the quota it held is free
    assert "workspace deleted" in old.events.last().reason  # type: ignore[union-attr]
    page = owner_client.get(f"/p/alpha/jobs/{old.pk}/").content.decode()
    assert "workspace deleted on" in page
    answer = owner_client.post(f"/p/alpha/jobs/{old.pk}/retry-push/")
    old.refresh_from_db()
    assert old.state == JobState.SYNC_FAILED, answer
    recent.refresh_from_db()
    assert recent.workspace_deleted_at is None
