"""A webhook or notice still queued for a run the job has left (a retry of run 1's delivery,
say, after the user ran the job again through the API and run 2 ended) posts nothing to the
project's receiver: the receiver hears each run's end once, with that run's state. Beside
test_notifications' task-level test, this one goes through the API's "run again" and a real
HTTP receiver on loopback."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core import mail

from controlpanel.engine.lifecycle import record_state
from controlpanel.jobs import tasks as job_tasks
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.controlpanel.jobs import test_notifications as notifications

pytestmark = pytest.mark.django_db
receiver, sent, finalize = notifications.receiver, notifications.sent, notifications.finalize


def test_a_stale_delivery_after_run_again_posts_nothing(
    project: Project, owner: Any, owner_api: Any, receiver: Any, sent: Any, finalize: Any
) -> None:
    url, received = receiver
    notifications._with_webhook(project, url)
    job = notifications._job(project, owner, JobState.DONE)
    finalize(str(job.pk), 1)
    assert [json.loads(body)["state"] for _, body in received] == ["DONE"]

    again = owner_api.post(f"/api/v1/jobs/{job.pk}/rerun/?project=alpha")
    assert again.status_code == 200, again.content
    job = Job.objects.get(pk=job.pk)
    record_state(job, JobState.FAILED, "exit code 1")
    job_tasks.job_webhook(str(job.pk), 1, JobState.DONE)  # run 1's delivery, retried late
    job_tasks.job_notify(str(job.pk), 1, JobState.DONE)  # run 1's notice, queued late
    assert len(received) == 1 and len(mail.outbox) == 1  # nothing of run 2 before its end

    finalize(str(job.pk), 2)
    bodies = [json.loads(body) for _, body in received]
    assert [(b["run"], b["state"]) for b in bodies] == [(1, "DONE"), (2, "FAILED")]
    assert [m.subject for m in mail.outbox] == ["[Ajuste] train: DONE", "[Ajuste] train: FAILED"]
