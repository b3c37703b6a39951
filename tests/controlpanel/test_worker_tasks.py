"""Tasks that other tests run in-process, here through a real Celery worker process (with
PostgreSQL, Redis and the S3 server): webhook retries with backoff, receivers that hang (each
try ends at its deadline, on a queue of its own), emptying and deleting a bucket, and retrying
a failed final push on the Kubernetes emulator."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlpanel.buckets.models import Bucket
from controlpanel.engine import tasks
from controlpanel.engine.backend import job_ref
from controlpanel.engine.webhooks import sign
from controlpanel.flavors.models import Flavor
from controlpanel.jobs import tasks as job_tasks
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy import names
from deploy.manifests.jobs import PUSH_BACKOFF_LIMIT
from storage.datastore import DatastoreConfig
from storage.objects import bucket_exists, put_object
from storage.presign import create_multipart_upload
from tests.fixtures.jobs import project_bucket
from tests.fixtures.processes import Processes, wait_for
from tests.fixtures.receivers import Hung, silent_tcp, trickling_http

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
S = JobState
BASE_MS = 50  # the worker's WEBHOOK_RETRY_BASE_MS: eight retries in about 13 s at most


def s3_env(s3: DatastoreConfig) -> dict[str, str]:
    return {
        "S3_ENDPOINT_URL": s3.endpoint_url,
        "S3_ACCESS_KEY": s3.access_key,
        "S3_SECRET_KEY": s3.secret_key,
        "S3_ALIAS": "LOCAL",
    }


@dataclass
class Hooks:
    """What a webhook receiver on loopback got: (monotonic time, headers, body) per POST."""

    url: str
    fail_first: dict[str, int]  # job name -> how many POSTs get a 503 before a 204
    got: dict[str, list[tuple[float, dict[str, str], bytes]]] = field(default_factory=dict)

    def of(self, name: str) -> list[tuple[float, dict[str, str], bytes]]:
        return self.got.get(name, [])


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    state = Hooks(url="", fail_first={"down": 10**6, "flaky": 2})
    lock = threading.Lock()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            name = json.loads(body)["name"]
            with lock:
                seen = state.got.setdefault(name, [])
                seen.append((time.monotonic(), dict(self.headers), body))
                failing = len(seen) <= state.fail_first[name]
            self.send_response(503 if failing else 204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}/hook"
    yield state
    server.shutdown()


def _ended_job(project: Project, owner: Any, name: str) -> Job:
    return Job.objects.create(
        project=project,
        owner=owner,
        name=name,
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=S.FAILED,
        state_reason="exit code 1",
        exit_code=1,
    )


def test_webhook_is_retried_eight_times_with_growing_waits(
    processes: Any, project: Project, owner: Any, hooks: Hooks
) -> None:
    project.webhook_url, project.webhook_secret = hooks.url, "s" * 43
    project.save()
    # The receivers are on loopback: webhooks may reach it only because the worker allows it.
    procs: Processes = processes(
        {"WEBHOOK_RETRY_BASE_MS": str(BASE_MS), "WEBHOOK_ALLOW_CIDRS": "127.0.0.1/32"}
    )
    procs.worker()
    for name in ("down", "flaky"):
        job = _ended_job(project, owner, name)
        job_tasks.job_notify.delay(str(job.pk), job.run, job.state)

    def given_up() -> bool:
        return re.search(r"job_webhook\[[^]]+\] raised unexpected: HTTP", procs.logs()) is not None

    def delivered() -> bool:
        return re.search(r"job_webhook\[[^]]+\] succeeded in", procs.logs()) is not None

    wait_for(given_up, 60, "the worker to give the webhook up", procs)
    wait_for(delivered, 30, "the flaky receiver's webhook to succeed", procs)
    down, flaky = hooks.of("down"), hooks.of("flaky")
    assert len(down) == 1 + 8  # the first POST and eight retries, then no more
    assert len(flaky) == 2 + 1  # two 503s, then a 204 ends it
    assert len({body for _, _, body in down}) == 1  # the same signed payload each time
    for _, headers, body in down + flaky:
        assert headers["X-Ajuste-Signature"] == sign("s" * 43, body)
    waits = [later[0] - earlier[0] for earlier, later in itertools.pairwise(down)]
    for retry, wait in enumerate(waits):
        # each wait at least half its ceiling (BASE_MS doubling): a fixed delay fails here
        assert wait >= BASE_MS / 1000 * 2**retry / 2, (retry, waits)


@pytest.fixture
def trickler() -> Iterator[Hung]:
    with trickling_http() as server:
        yield server


@pytest.fixture
def silent_smtp() -> Iterator[Hung]:
    with silent_tcp() as server:
        yield server


def _ran(procs: Processes, task: str, outcome: str) -> bool:
    return re.search(rf"{task}\[[^]]+\] {outcome}", procs.logs()) is not None


def test_a_receiver_that_never_finishes_holds_up_no_reconcile_and_each_try_ends(
    processes: Any, project: Project, owner: Any, trickler: Hung
) -> None:
    """The notifier (one slot) is busy with a receiver that trickles a byte every 0.2 s forever
    (no per-read timeout ever fires): a reconcile still runs, on the other worker, and each
    try of the webhook ends at its deadline and is retried."""
    project.webhook_url, project.webhook_secret = trickler.url, "s" * 43
    project.save()
    procs: Processes = processes(
        {
            "WEBHOOK_TIMEOUT_SECONDS": "2",
            "WEBHOOK_RETRY_BASE_MS": str(BASE_MS),
            "WEBHOOK_ALLOW_CIDRS": "127.0.0.1/32",
        }
    )
    # As the Procfile runs them: reconciles on one worker, notifications on another.
    procs.worker("worker", queues="celery", concurrency=1)
    procs.worker("notifier", queues="notifications", concurrency=1)
    job = _ended_job(project, owner, "slow")
    job_tasks.job_webhook.delay(str(job.pk), job.run, job.state)
    wait_for(lambda: trickler.accepted, 30, "the webhook to reach the receiver", procs)
    tasks.job_reconcile.delay(str(uuid.uuid4()))
    wait_for(lambda: _ran(procs, "job_reconcile", "succeeded"), 30, "the reconcile", procs)
    wait_for(
        lambda: _ran(procs, "job_webhook", r"retry: .*within the 2 s deadline"),
        30,
        "the webhook's try to end at its deadline",
        procs,
    )
    wait_for(lambda: trickler.accepted >= 2, 30, "the webhook to be tried again", procs)


def test_a_mail_server_that_never_answers_is_let_go_after_email_timeout(
    processes: Any, project: Project, owner: Any, silent_smtp: Hung
) -> None:
    procs: Processes = processes(
        {
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(silent_smtp.port),
            "EMAIL_TIMEOUT": "1",
            "WEBHOOK_RETRY_BASE_MS": str(BASE_MS),
        }
    )
    procs.worker("notifier", queues="notifications", concurrency=1)
    job = _ended_job(project, owner, "mailed")
    job_tasks.job_notify.delay(str(job.pk), job.run, job.state)
    wait_for(lambda: silent_smtp.accepted, 30, "the worker to reach the mail server", procs)
    wait_for(
        lambda: _ran(procs, "job_notify", r"(retry|raised).*timed out"),
        30,
        "the e-mail's try to end at EMAIL_TIMEOUT",
        procs,
    )


def test_bucket_is_emptied_and_deleted_by_the_worker(
    processes: Any, owner_api: APIClient, project: Project, panel_s3: DatastoreConfig
) -> None:
    bucket = project_bucket(project, panel_s3)
    for index in range(25):
        put_object(panel_s3, bucket=bucket.name, key=f"data/{index:03}.bin", data=b"x" * index)
    create_multipart_upload(panel_s3, bucket=bucket.name, key="unfinished.bin")
    procs: Processes = processes(s3_env(panel_s3))
    procs.worker()
    url = f"/api/v1/buckets/LOCAL/{bucket.name}/"
    assert owner_api.delete(url).status_code == 409  # not empty: refused without ?empty
    response = owner_api.delete(url + "?empty=true")
    assert response.status_code == 202 and response.json()["state"] == "emptying"
    wait_for(lambda: not Bucket.objects.filter(pk=bucket.pk).exists(), 60, "the row to go", procs)
    assert not bucket_exists(panel_s3, bucket=bucket.name)
    assert "empty_and_delete_bucket" in procs.logs()


NS = "ajuste-alpha"


def test_a_failed_push_is_retried_by_the_worker(
    processes: Any,
    k8s_cluster: Any,
    k8s_jobs: Any,
    panel_s3: DatastoreConfig,
    owner_api: APIClient,
    project: Project,
) -> None:
    out = project_bucket(project, panel_s3, name=f"out-{uuid.uuid4().hex[:12]}")
    env = s3_env(panel_s3) | {"COMPUTE_BACKEND": "kubernetes"}
    procs: Processes = processes(env | {"KUBECONFIG": k8s_cluster.kubeconfig})
    procs.worker()
    procs.beat()
    procs.watcher()
    response = owner_api.post(
        "/api/v1/jobs/",
        {
            "image": "x/y:1",
            "flavor": "l4-1-gpu",
            "command": ["run"],
            "volumes": [f"{out.name}@LOCAL/run:/workspace/output:rw"],
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    kubelet = k8s_cluster.kubelet

    def state() -> str:
        return str(Job.objects.get(pk=job.pk).state)

    main = names.job_name(job_ref(job))
    pod = wait_for(lambda: k8s_cluster.pods_of(NS, main), 60, "pod", procs)[0]["metadata"]["name"]
    kubelet.run(NS, pod)
    kubelet.finish(NS, pod, exit_code=0)
    first = names.push_job_name(job_ref(job), 1)
    for attempt in range(PUSH_BACKOFF_LIMIT + 1):  # the Job controller retries the pod
        if attempt:
            k8s_cluster.back_off()
        wait_for(lambda n=attempt: k8s_cluster.pods_of(NS, first)[n:], 30, "a push pod", procs)
        kubelet.finish(NS, k8s_cluster.pod_of(NS, first), exit_code=1, message="503 Slow Down")
    wait_for(lambda: state() == S.SYNC_FAILED, 30, "SYNC_FAILED", procs)

    retried = owner_api.post(f"/api/v1/jobs/{job.pk}/retry-push/")
    assert retried.status_code == 200, retried.json()
    second = names.push_job_name(job_ref(job), 2)
    wait_for(lambda: k8s_cluster.pods_of(NS, second), 30, "the second push pod", procs)
    kubelet.finish(NS, k8s_cluster.pod_of(NS, second), exit_code=0)
    wait_for(lambda: state() == S.DONE, 30, "DONE", procs)
    history = [h["state"] for h in owner_api.get(f"/api/v1/jobs/{job.pk}/").json()["history"]]
    changes = [state for i, state in enumerate(history) if not i or state != history[i - 1]]
    assert changes[-3:] == ["SYNC_FAILED", "FINALIZING", "DONE"]  # reasons within one too

    def made(job_name: str) -> list[Any]:  # pods ever made: the clean end deletes the run's
        return [  # ended pods with its workspace claim, which they would hold otherwise
            pod
            for pod in k8s_cluster.created("pods", NS)
            if (pod["metadata"].get("labels") or {}).get("job-name") == job_name
        ]

    assert len(made(second)) == 1
    assert len(made(first)) == PUSH_BACKOFF_LIMIT + 1
