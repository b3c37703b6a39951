"""A failed fine-tune's reason is the sentence of the image's `error` event (#32), wherever it is
shown (job page header and timeline, API, dashboard's recent failures, the e-mail): never its
JSON, never a path of the panel's machine, even when the line was clipped to fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core import mail
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.engine.lifecycle import apply_observation
from controlpanel.engine.models import JobEvent
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.notifications import send_job_email
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy.local.supervisor import last_words
from deploy.types import ObservedWorkload, Phase, WorkloadKind

SENTENCE = "/workspace/data: no *.jsonl training file in this directory"
PANEL = "/srv/ajuste/var/workloads/runs/job-1-r1/root/workspace"


def error_line(message: str = SENTENCE, where: str = "/workspace/data") -> str:
    event = {"event": "error", "v": 1, "time": 1733130000.0, "kind": "dataset", "exit_code": 2}
    errors = [{"file": where, "line": 0, "message": "no *.jsonl training file in this directory"}]
    return json.dumps(event | {"message": message, "errors": errors * 3})


def failed(project: Project, owner: Any, reason: str, **fields: Any) -> Job:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    job = Job.objects.create(
        project=project, owner=owner, name="tune", image="x/y:1", flavor=flavor, **fields
    )
    job.state = JobState.RUNNING
    job.save()
    seen = ObservedWorkload(
        kind=WorkloadKind.JOB,
        id=str(job.pk),
        phase=Phase.FAILED,
        reason=reason,
        exit_code=2,
        finished_at=timezone.now(),
    )
    apply_observation(job, seen)
    job.refresh_from_db()
    return job


def test_a_clipped_error_event_reads_as_its_sentence_everywhere(
    owner_client: Client, owner_api: APIClient, project: Project, owner: Any
) -> None:
    # What the backends report: the last line clipped to 300 characters, cut inside `errors`.
    reason = f"exit code 2: {error_line(where=PANEL + '/data')}"[:299] + "…"
    job = failed(project, owner, reason)
    assert job.state == JobState.FAILED
    assert job.state_reason == f"exit code 2: {SENTENCE}"
    timeline = JobEvent.objects.get(job=job, state=JobState.FAILED)
    assert timeline.reason == job.state_reason
    shown = [
        owner_client.get(f"/p/{project.slug}/jobs/{job.pk}/").content.decode(),
        owner_client.get(f"/p/{project.slug}/dashboard/?range=7d").content.decode(),
        json.dumps(owner_api.get(f"/api/v1/jobs/{job.pk}/?project={project.slug}").json()),
    ]
    send_job_email(job)
    shown.append(mail.outbox[-1].body)
    for text in shown:
        assert "no *.jsonl training file in this directory" in text
        assert '"event"' not in text and "&quot;event&quot;" not in text
        assert "var/workloads" not in text


def test_a_message_cut_itself_is_read_from_the_run_s_progress(project: Project, owner: Any) -> None:
    long = "train.jsonl line 7: " + "x" * 400
    cut = f"exit code 2: {error_line(message=long)}"[:299] + "…"
    progress = {"last_event": "error", "kind": "dataset", "message": "the dataset is bad"}
    job = failed(project, owner, cut, progress=progress)
    assert job.state_reason == "exit code 2: the dataset is bad"
    alone = failed(project, owner, cut)
    assert alone.state_reason == "exit code 2"


def test_plain_last_words_are_kept(project: Project, owner: Any) -> None:
    job = failed(project, owner, "exit code 1: {not json at all")
    assert job.state_reason == "exit code 1: {not json at all"


def test_the_local_backend_maps_paths_before_it_clips(tmp_path: Path) -> None:
    workspace = tmp_path / "var" / "workloads" / "runs" / "job-1-r1" / "root" / "workspace"
    workspace.mkdir(parents=True)
    log = tmp_path / "output.log"
    line = error_line(where=f"{workspace}/data/" + "d" * 250 + "/train.jsonl")
    log.write_text(f"[training] starting\n{line}\n")
    words = last_words(log, workspace)
    assert str(tmp_path) not in words and "var/workloads" not in words
    assert words.endswith("…") and "/workspace/data/ddd" in words
