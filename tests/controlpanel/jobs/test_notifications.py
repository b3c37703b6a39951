"""Job notifications: sent even when archiving the log fails, once per (run, final state) so a
retried push that ends DONE is told too, and every webhook signed."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import F

from controlpanel.core import public_http
from controlpanel.engine import backend as backend_module
from controlpanel.engine import tasks
from controlpanel.engine.lifecycle import apply_observation, record_state
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.engine.webhooks import sign
from controlpanel.flavors.models import Flavor
from controlpanel.jobs import services
from controlpanel.jobs import tasks as job_tasks
from controlpanel.jobs.models import Job
from controlpanel.jobs.notifications import post_webhook, send_job_email
from controlpanel.jobs.states import JobState
from controlpanel.projects.access import ProjectAccess, project_access
from controlpanel.projects.models import Project
from deploy.types import ObservedWorkload, Phase, WorkloadKind
from tests.fixtures.receivers import trickling_http

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
def receiver(settings: Any) -> Any:
    """A receiver on loopback, which webhooks may reach only because this test allows it."""
    settings.WEBHOOK_ALLOW_CIDRS = ["127.0.0.1/32"]
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

    monkeypatch.setattr(job_tasks.job_notify, "delay", now(job_tasks.job_notify))
    monkeypatch.setattr(job_tasks.job_webhook, "delay", now(job_tasks.job_webhook))
    for name, task in (
        ("project_admit", tasks.project_admit),
        ("job_finalize", tasks.job_finalize),
        ("job_retry_push", job_tasks.job_retry_push),
    ):
        record = (lambda n: lambda *a, **k: calls.append((n, a)))(name)
        monkeypatch.setattr(task, "delay", record)
        monkeypatch.setattr(task, "delay_on_commit", record)
    monkeypatch.setattr(tasks.job_reconcile, "apply_async", lambda *a, **k: None)
    monkeypatch.setattr(tasks, "archive_logs", lambda **kwargs: True)
    return calls


@pytest.fixture
def finalize(django_capture_on_commit_callbacks: Any) -> Any:
    """job_finalize as the worker runs it: what it sends on its claim's commit goes out."""

    def run(job_id: str, run: int) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            tasks.job_finalize(job_id, run)

    return run


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
    project: Project, owner: Any, sent: Any, monkeypatch: pytest.MonkeyPatch, finalize: Any
) -> None:
    job = _job(project, owner, S.FAILED, state_reason="exit code 3")

    def broken(**kwargs: Any) -> bool:
        raise ConnectionError("object store down")

    monkeypatch.setattr(tasks, "archive_logs", broken)
    for _ in range(3):  # the task's own retries, then the sweep's refinalize
        with pytest.raises(ConnectionError):
            finalize(str(job.pk), 1)
    assert _notices(sent) == [(str(job.pk), 1, S.FAILED)]
    assert [m.subject for m in mail.outbox] == ["[Ajuste] train: FAILED"]
    assert ("project_admit", (project.pk,)) in sent


def test_done_after_retried_push_is_told_once_each(
    project: Project,
    owner: Any,
    sent: Any,
    receiver: Any,
    monkeypatch: pytest.MonkeyPatch,
    finalize: Any,
) -> None:
    url, received = receiver
    secret = _with_webhook(project, url)
    pushes: list[str] = []
    fake = SimpleNamespace(retry_push=lambda *, job: pushes.append(job.id))
    monkeypatch.setattr(job_tasks, "get_backend", lambda: fake)
    job = _job(project, owner, S.SYNC_FAILED, state_reason="final push failed: 503")
    finalize(str(job.pk), 1)
    finalize(str(job.pk), 1)  # a duplicate never notifies twice
    access = project_access(user=owner, slug="alpha")
    job = services.job_retry_push(access=access, user=owner, job=job)
    finalize(str(job.pk), 1)  # a late one while FINALIZING waits for the end
    job_tasks.job_retry_push(str(job.pk))
    job_tasks.job_retry_push(str(job.pk))  # the task retried
    assert len(pushes) == 2
    record_state(job, S.DONE, "exit code 0")
    finalize(str(job.pk), 1)
    finalize(str(job.pk), 1)
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
    project: Project, owner: Any, sent: Any, monkeypatch: pytest.MonkeyPatch, finalize: Any
) -> None:
    monkeypatch.setattr(
        backend_module, "get_backend", lambda: SimpleNamespace(retry_push=lambda *, job: None)
    )
    job = _job(project, owner, S.SYNC_FAILED)
    finalize(str(job.pk), 1)
    job = services.job_retry_push(
        access=project_access(user=owner, slug="alpha"), user=owner, job=job
    )
    job_tasks.job_retry_push(str(job.pk))
    record_state(job, S.SYNC_FAILED, "final push failed again")
    finalize(str(job.pk), 1)
    finalize(str(job.pk), 1)
    assert [args[2] for args in _notices(sent)] == [S.SYNC_FAILED, S.SYNC_FAILED]


def test_stale_notice_of_a_state_the_job_left_is_dropped(
    project: Project, owner: Any, sent: Any
) -> None:
    job = _job(project, owner, S.DONE, run=2)
    job_tasks.job_notify(str(job.pk), 1, S.DONE)  # run 1's notice, queued before "run again"
    job_tasks.job_notify(str(job.pk), 2, S.SYNC_FAILED)  # before the push was retried
    job_tasks.job_webhook(str(job.pk), 2, S.SYNC_FAILED)
    assert mail.outbox == []
    job_tasks.job_notify(str(job.pk))  # queued by the previous version: still sent
    assert [m.subject for m in mail.outbox] == ["[Ajuste] train: DONE"]


def test_a_new_run_is_notified_again(
    project: Project, owner: Any, sent: Any, finalize: Any
) -> None:
    job = _job(project, owner, S.DONE, notified_run=1)
    finalize(str(job.pk), 1)
    Job.objects.filter(pk=job.pk).update(run=2, state=S.FAILED)
    finalize(str(job.pk), 1)  # the old run's task: gone
    finalize(str(job.pk), 2)
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


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 a link-local address"),
        ("http://127.0.0.1:8000/admin/", "127.0.0.1 a loopback address"),
        ("http://[::1]/x", "::1 a loopback address"),
        ("http://[::ffff:10.0.0.1]/x", "::ffff:10.0.0.1 a private address"),
        ("http://10.96.0.1:443/api", "10.96.0.1 a private address"),
        ("https://192.168.1.20/hook", "192.168.1.20 a private address"),
        ("http://100.64.0.7/hook", "100.64.0.7 not a public address"),  # shared (CGNAT)
        ("http://224.0.0.1/x", "224.0.0.1 a multicast address"),
        ("http://0.0.0.0:8000/x", "0.0.0.0 an unspecified address"),
    ],
)
def test_webhook_to_a_non_public_address_is_refused_at_save(
    project: Project, url: str, why: str
) -> None:
    from controlpanel.projects.services import project_webhook_set

    access = ProjectAccess(project=project, role="manager", is_admin=False)
    with pytest.raises(ValidationError) as caught:
        project_webhook_set(access=access, url=url)
    message = caught.value.message_dict["webhook_url"][0]
    assert message.startswith(why + ": webhooks reach public addresses only"), message
    assert Project.objects.get(pk=project.pk).webhook_url == ""


def test_a_name_resolving_to_a_private_address_is_refused_at_save(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlpanel.projects.services import project_webhook_set

    monkeypatch.setattr(public_http, "resolve", _answer("10.0.0.12"))
    access = ProjectAccess(project=project, role="manager", is_admin=False)
    with pytest.raises(ValidationError) as caught:
        project_webhook_set(access=access, url="https://jenkins.corp.test/hook")
    assert caught.value.message_dict["webhook_url"] == [
        "jenkins.corp.test resolves to 10.0.0.12, a private address: webhooks reach public "
        "addresses only (an admin can allow a private range with WEBHOOK_ALLOW_CIDRS)."
    ]


def _answer(address: str, asked: list[str] | None = None) -> Any:
    def getaddrinfo(host: str, port: int, **kwargs: Any) -> list[Any]:
        if asked is not None:
            asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    return getaddrinfo


def test_a_name_now_resolving_to_the_metadata_address_is_not_sent(
    project: Project, owner: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Saved while it resolved to a public address; at send time it resolves to the metadata
    service: nothing is sent, and it is not retried (post_webhook returns)."""
    Project.objects.filter(pk=project.pk).update(
        webhook_url="http://hooks.attacker.test/x", webhook_secret="k" * 43
    )
    project.refresh_from_db()
    monkeypatch.setattr(public_http, "resolve", _answer("169.254.169.254"))
    post_webhook(_job(project, owner, S.DONE))
    assert (
        "webhook not sent: hooks.attacker.test resolves to 169.254.169.254, a link-local address"
        in caplog.text
    )


def test_webhook_connects_to_the_address_it_vetted(
    project: Project, owner: Any, receiver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the vetting lookup answers the (allowed) receiver; any later lookup of the
    name would answer another address, where nothing listens. The POST reaches the receiver,
    with the name in Host: the connection used the vetted address."""
    url, received = receiver
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    vetted: list[str] = []
    monkeypatch.setattr(public_http, "resolve", _answer("127.0.0.1", vetted))
    real = socket.getaddrinfo

    def rebound(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.example.test":
            return _answer("127.0.0.2")(host, args[0] if args else 0)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebound)
    Project.objects.filter(pk=project.pk).update(
        webhook_url=f"http://hooks.example.test:{port}/hook", webhook_secret="k" * 43
    )
    project.refresh_from_db()
    post_webhook(_job(project, owner, S.DONE))
    headers, body = received[0]
    assert headers["Host"] == f"hooks.example.test:{port}"
    assert json.loads(body)["state"] == "DONE"
    assert set(vetted) == {"hooks.example.test"}


def test_https_webhook_to_the_vetted_address_checks_the_name_certificate(
    settings: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connecting to an address, not a name, must keep TLS as strict as before: the handshake
    carries the name (SNI) and the certificate is checked against it."""
    import ssl
    from http.server import ThreadingHTTPServer

    settings.WEBHOOK_ALLOW_CIDRS = ["127.0.0.1/32"]
    cert, key = _self_signed(tmp_path, "hooks.example.test")
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    names: list[str | None] = []
    server_context.sni_callback = lambda sock, name, ctx: names.append(name)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Receiver.received = []
    trust = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(public_http, "resolve", _answer("127.0.0.1"))
    try:
        port = server.server_port
        response = public_http.post(
            f"https://hooks.example.test:{port}/hook",
            content=b"{}",
            headers={"Content-Type": "application/json"},
            timeout=10,
            verify=trust,
        )
        assert response.status_code == 204 and names == ["hooks.example.test"]
        with pytest.raises(httpx.ConnectError, match=r"certificate|hostname"):
            public_http.post(  # the certificate names hooks.example.test, not this
                f"https://other.example.test:{port}/hook",
                content=b"{}",
                headers={},
                timeout=10,
                verify=trust,
            )
    finally:
        server.shutdown()
    assert len(_Receiver.received) == 1


def _self_signed(folder: Any, name: str) -> tuple[Any, Any]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_the_deny_list_wins_over_the_allow_list(settings: Any) -> None:
    settings.WEBHOOK_ALLOW_CIDRS = ["10.0.0.0/8"]
    settings.WEBHOOK_DENY_CIDRS = ["10.96.0.0/12", "8.8.4.0/24"]
    assert public_http.refusal(ipaddress.ip_address("10.1.2.3")) is None
    for denied in ("10.96.0.1", "8.8.4.4"):
        why = public_http.refusal(ipaddress.ip_address(denied))
        assert why == "in WEBHOOK_DENY_CIDRS (the cluster's own ranges)"
    assert public_http.refusal(ipaddress.ip_address("8.8.8.8")) is None
    assert public_http.refusal(ipaddress.ip_address("172.16.0.1")) == "a private address"


def test_a_receiver_that_trickles_its_answer_is_let_go_at_the_deadline(settings: Any) -> None:
    """A byte every 0.2 s: each read gets one, so a per-read timeout never fires; the deadline
    covers the whole request."""
    settings.WEBHOOK_ALLOW_CIDRS = ["127.0.0.1/32"]
    late = pytest.raises(httpx.ReadTimeout, match="within the 1 s deadline")
    with trickling_http() as receiver, late:
        public_http.post(receiver.url, content=b"{}", headers={}, timeout=1)
    assert receiver.accepted == 1


def test_a_name_that_never_resolves_is_let_go_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """getaddrinfo takes no timeout: the lookup counts against the same deadline."""
    answer = threading.Event()

    def hung(host: str, port: int, **kwargs: Any) -> list[Any]:
        answer.wait()
        return _answer("93.184.215.14")(host, port)

    monkeypatch.setattr(public_http, "resolve", hung)
    try:
        with pytest.raises(httpx.ConnectTimeout, match="within the 1 s deadline"):
            public_http.post("http://hooks.example.test/x", content=b"{}", headers={}, timeout=1)
    finally:
        answer.set()


def _claimed_long_ago(job: Job) -> None:
    """As if a day had passed since the notice was claimed (or last sent again)."""
    Job.objects.filter(pk=job.pk).update(notice_claimed_at=F("notice_claimed_at") - timedelta(1))


def test_a_notice_claimed_then_lost_is_sent_once_by_the_sweep(
    project: Project,
    owner: Any,
    sent: Any,
    receiver: Any,
    monkeypatch: pytest.MonkeyPatch,
    finalize: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    url, received = receiver
    _with_webhook(project, url)
    job = _job(project, owner, S.FAILED, state_reason="exit code 1")
    deliver = job_tasks.job_notify.delay
    # The worker dies between the claim's commit and the message: nothing goes out.
    monkeypatch.setattr(job_tasks.job_notify, "delay", lambda *args: None)
    finalize(str(job.pk), 1)
    assert Job.objects.get(pk=job.pk).notified_run == 1
    monkeypatch.setattr(job_tasks.job_notify, "delay", deliver)
    with django_capture_on_commit_callbacks(execute=True):
        sweep()  # within the period: the message may still be on its way
    assert mail.outbox == [] and received == []
    _claimed_long_ago(job)
    for _ in range(3):  # this sweep sends it; the next ones find it handed over
        with django_capture_on_commit_callbacks(execute=True):
            sweep()
        _claimed_long_ago(job)
    assert [m.subject for m in mail.outbox] == ["[Ajuste] train: FAILED"]
    assert [json.loads(body)["state"] for _, body in received] == ["FAILED"]


def test_a_notice_sent_at_its_claim_is_never_sent_again(
    project: Project, owner: Any, sent: Any, finalize: Any, django_capture_on_commit_callbacks: Any
) -> None:
    job = _job(project, owner, S.DONE)
    finalize(str(job.pk), 1)
    job_tasks.job_notify(str(job.pk), 1, S.DONE)  # a duplicate message, after the first
    assert [m.subject for m in mail.outbox] == ["[Ajuste] train: DONE"]
    _claimed_long_ago(job)
    with django_capture_on_commit_callbacks(execute=True):
        sweep()
    assert [m.subject for m in mail.outbox] == ["[Ajuste] train: DONE"]
