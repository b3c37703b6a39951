"""Job notifications: sent even when archiving the log fails, once per (run, final state) so a
retried push that ends DONE is told too, and every webhook signed."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from django.core import mail
from django.db import connection

from controlpanel.flavors.models import Flavor
from controlpanel.projects.access import project_access
from controlpanel.projects.models import Project
from controlpanel.workloads import backend as backend_module
from controlpanel.workloads import logs, services, tasks
from controlpanel.workloads.lifecycle import apply_observation, record_state
from controlpanel.workloads.models import Job, JobState
from controlpanel.workloads.notifications import post_webhook, send_job_email, sign
from deploy.types import ObservedWorkload, Phase, WorkloadKind

S = JobState


class _Receiver(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Receiver.received.append((dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Any:
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Receiver.received = []
    yield f"http://127.0.0.1:{server.server_port}/hook", _Receiver.received
    server.shutdown()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """Tasks run in-process: notify and webhook at once; what else is enqueued is recorded."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    calls: list[tuple[str, tuple[Any, ...]]] = []

    def now(task: Any) -> Any:
        def delay(*args: Any) -> None:
            calls.append((task.name.rsplit(".", 1)[-1], args))
            task(*args)

        return delay

    monkeypatch.setattr(tasks.job_notify, "delay", now(tasks.job_notify))
    monkeypatch.setattr(tasks.job_webhook, "delay", now(tasks.job_webhook))
    for name in ("project_admit", "job_finalize", "job_retry_push"):
        task = getattr(tasks, name)
        record = (lambda n: lambda *a, **k: calls.append((n, a)))(name)
        monkeypatch.setattr(task, "delay", record)
        monkeypatch.setattr(task, "delay_on_commit", record)
    monkeypatch.setattr(tasks.job_reconcile, "apply_async", lambda *a, **k: None)
    monkeypatch.setattr(logs, "archive_logs", lambda **kwargs: True)
    return calls


def _job(project: Project, owner: Any, state: str, **fields: Any) -> Job:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    fields = {"name": "train", "image": "x/y:1", "flavor": flavor, "launched_run": 1} | fields
    return Job.objects.create(project=project, owner=owner, state=state, **fields)


def _notices(calls: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    return [args for name, args in calls if name == "job_notify"]


def _with_webhook(project: Project, url: str) -> str:
    project.webhook_url, project.webhook_secret = url, "k" * 43
    project.save()
    return project.webhook_secret


def test_archive_failure_costs_neither_notice_nor_quota(
    project: Project, owner: Any, sent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(project, owner, S.FAILED, state_reason="exit code 3")

    def broken(**kwargs: Any) -> bool:
        raise ConnectionError("object store down")

    monkeypatch.setattr(logs, "archive_logs", broken)
    for _ in range(3):  # the task's own retries, then the sweep's refinalize
        with pytest.raises(ConnectionError):
            tasks.job_finalize(str(job.pk), 1)
    assert _notices(sent) == [(str(job.pk), 1, S.FAILED)]
    assert [m.subject for m in mail.outbox] == ["[Ajuste] train: FAILED"]
    assert ("project_admit", (project.pk,)) in sent


def test_done_after_retried_push_is_told_once_each(
    project: Project, owner: Any, sent: Any, receiver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, received = receiver
    secret = _with_webhook(project, url)
    pushes: list[str] = []
    fake = SimpleNamespace(retry_push=lambda *, job: pushes.append(job.id))
    monkeypatch.setattr(backend_module, "get_backend", lambda: fake)
    job = _job(project, owner, S.SYNC_FAILED, state_reason="final push failed: 503")
    tasks.job_finalize(str(job.pk), 1)
    tasks.job_finalize(str(job.pk), 1)  # a duplicate never notifies twice
    access = project_access(user=owner, slug="alpha")
    job = services.job_retry_push(access=access, user=owner, job=job)
    tasks.job_finalize(str(job.pk), 1)  # a late one while FINALIZING waits for the end
    tasks.job_retry_push(str(job.pk))
    tasks.job_retry_push(str(job.pk))  # the task retried
    assert len(pushes) == 2
    record_state(job, S.DONE, "exit code 0")
    tasks.job_finalize(str(job.pk), 1)
    tasks.job_finalize(str(job.pk), 1)
    assert _notices(sent) == [(str(job.pk), 1, S.SYNC_FAILED), (str(job.pk), 1, S.DONE)]
    assert [m.subject for m in mail.outbox] == [
        "[Ajuste] train: SYNC_FAILED",
        "[Ajuste] train: DONE",
    ]
    states = [json.loads(body)["state"] for _, body in received]
    assert states == ["SYNC_FAILED", "DONE"]
    for headers, body in received:
        expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        assert headers["X-Ajuste-Signature"] == f"sha256={expected}"


def test_a_push_that_fails_again_is_told_again(
    project: Project, owner: Any, sent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        backend_module, "get_backend", lambda: SimpleNamespace(retry_push=lambda *, job: None)
    )
    job = _job(project, owner, S.SYNC_FAILED)
    tasks.job_finalize(str(job.pk), 1)
    job = services.job_retry_push(
        access=project_access(user=owner, slug="alpha"), user=owner, job=job
    )
    tasks.job_retry_push(str(job.pk))
    record_state(job, S.SYNC_FAILED, "final push failed again")
    tasks.job_finalize(str(job.pk), 1)
    tasks.job_finalize(str(job.pk), 1)
    assert [args[2] for args in _notices(sent)] == [S.SYNC_FAILED, S.SYNC_FAILED]


def test_stale_notice_of_a_state_the_job_left_is_dropped(
    project: Project, owner: Any, sent: Any
) -> None:
    job = _job(project, owner, S.DONE, run=2)
    tasks.job_notify(str(job.pk), 1, S.DONE)  # run 1's notice, queued before "run again"
    tasks.job_notify(str(job.pk), 2, S.SYNC_FAILED)  # before the push was retried
    tasks.job_webhook(str(job.pk), 2, S.SYNC_FAILED)
    assert mail.outbox == []
    tasks.job_notify(str(job.pk))  # queued by the previous version: still sent
    assert [m.subject for m in mail.outbox] == ["[Ajuste] train: DONE"]


def test_a_new_run_is_notified_again(project: Project, owner: Any, sent: Any) -> None:
    job = _job(project, owner, S.DONE, notified_run=1)
    tasks.job_finalize(str(job.pk), 1)
    Job.objects.filter(pk=job.pk).update(run=2, state=S.FAILED)
    tasks.job_finalize(str(job.pk), 1)  # the old run's task: gone
    tasks.job_finalize(str(job.pk), 2)
    assert _notices(sent) == [(str(job.pk), 2, S.FAILED)]


def test_webhook_without_secret_gets_one_and_is_signed(
    project: Project, owner: Any, receiver: Any
) -> None:
    url, received = receiver
    Project.objects.filter(pk=project.pk).update(webhook_url=url)  # as the admin could
    project.refresh_from_db()
    job = _job(project, owner, S.DONE)
    post_webhook(job)
    secret = Project.objects.get(pk=project.pk).webhook_secret
    assert len(secret) >= 43
    headers, body = received[0]
    assert headers["X-Ajuste-Signature"] == (
        "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    )
    assert headers["X-Ajuste-Event"] == "job.finished"
    assert headers["Content-Type"] == "application/json"
    payload = json.loads(body)
    assert set(payload) == {
        "event",
        "id",
        "name",
        "project",
        "run",
        "state",
        "state_reason",
        "exit_code",
        "started_at",
        "finished_at",
        "url",
    }
    assert payload["url"].endswith(f"/p/alpha/jobs/{job.pk}/")


def test_unreadable_secret_is_replaced_not_fatal(
    project: Project, owner: Any, receiver: Any
) -> None:
    url, received = receiver
    _with_webhook(project, url)
    with connection.cursor() as cursor:  # as after SECRET_KEY changed without a fallback
        cursor.execute(
            "UPDATE projects_project SET webhook_secret = %s WHERE id = %s",
            ["gAAAAAnotatoken", project.pk],
        )
    fresh = Project.objects.get(pk=project.pk)
    assert fresh.webhook_secret == ""
    post_webhook(_job(fresh, owner, S.DONE))
    secret = Project.objects.get(pk=project.pk).webhook_secret
    assert secret and secret != "k" * 43
    headers, body = received[0]
    assert headers["X-Ajuste-Signature"].removeprefix("sha256=") == (
        hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    )


def test_webhook_with_a_url_the_form_refuses_is_not_sent(
    project: Project, owner: Any, caplog: pytest.LogCaptureFixture
) -> None:
    Project.objects.filter(pk=project.pk).update(webhook_url="ftp://files.example.com/x")
    project.refresh_from_db()
    post_webhook(_job(project, owner, S.DONE))  # no network call: it would raise
    assert "webhook not sent: Use an http:// or https:// URL (not ftp:)." in caplog.text


def test_notifications(project: Project, owner: Any, receiver: Any, settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    url, received = receiver
    project.webhook_url, project.webhook_secret = url, "s3cret"
    project.save()
    job = Job.objects.create(
        project=project,
        owner=owner,
        name="job",
        image="x/y:1",
        flavor=Flavor.objects.get(name="h100-1-gpu"),
        state=JobState.FAILED,
        state_reason="exit code 1",
        exit_code=1,
    )
    send_job_email(job)
    assert mail.outbox[0].subject == "[Ajuste] job: FAILED" and "exit code 1" in mail.outbox[0].body
    post_webhook(job)
    headers, body = received[0]
    assert headers["X-Ajuste-Signature"] == sign("s3cret", body)
    payload = json.loads(body)
    assert (payload["state"], payload["exit_code"], payload["project"]) == ("FAILED", 1, "alpha")


def test_the_retried_push_is_not_ended_by_the_old_ones_failure(
    project: Project, owner: Any, sent: Any
) -> None:
    """Until the retry task starts attempt 2, the cluster still shows attempt 1 failed; a watch
    or sweep seeing that must not put the job back to SYNC_FAILED (it would never end DONE)."""
    job = _job(project, owner, S.SYNC_FAILED, state_reason="final push failed: 503")
    job = services.job_retry_push(
        access=project_access(user=owner, slug="alpha"), user=owner, job=job
    )

    def seen(attempt: int, phase: Phase) -> ObservedWorkload:
        return ObservedWorkload(
            WorkloadKind.JOB, str(job.pk), phase, "final push failed: 503", push_attempt=attempt
        )

    assert not apply_observation(job, seen(1, Phase.SYNC_FAILED))
    assert Job.objects.get(pk=job.pk).state == S.FINALIZING
    assert apply_observation(job, seen(2, Phase.SYNC_FAILED))  # the retried push failed too
    assert Job.objects.get(pk=job.pk).state == S.SYNC_FAILED
