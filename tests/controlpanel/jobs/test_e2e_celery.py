"""End to end with real Celery worker, beat and watcher processes, PostgreSQL, Redis, the S3
server and the Kubernetes emulator: the API submits, the workers drive the cluster, the test
kubelet plays the nodes."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlpanel.buckets.models import Bucket
from controlpanel.engine import tasks
from controlpanel.engine.backend import job_ref
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from deploy import names
from tests.fixtures.jobs import project_bucket
from tests.fixtures.processes import Processes, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.k8s,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]
NS = "ajuste-alpha"
S = JobState


@pytest.fixture
def cluster_env(k8s_cluster: Any, k8s_jobs: Any, panel_s3: Any) -> dict[str, str]:
    return {
        "COMPUTE_BACKEND": "kubernetes",
        "KUBECONFIG": k8s_cluster.kubeconfig,  # its server and bearer token
        "S3_ENDPOINT_URL": panel_s3.endpoint_url,
        "S3_ACCESS_KEY": panel_s3.access_key,
        "S3_SECRET_KEY": panel_s3.secret_key,
        "S3_ALIAS": "LOCAL",
    }


def state_of(job_id: str) -> tuple[str, str]:
    job = Job.objects.get(pk=job_id)
    return job.state, job.state_reason


def job_pods(cluster: Any, job: Job) -> list[Any]:
    return cluster.pods_of(NS, names.job_name(job_ref(job)))


def test_kubernetes_journey(
    processes: Any,
    cluster_env: dict[str, str],
    k8s_cluster: Any,
    owner_api: APIClient,
    project: Project,
    panel_s3: Any,
    data_bucket: Bucket,
) -> None:
    procs: Processes = processes(cluster_env)
    procs.worker()
    procs.beat()
    procs.watcher()
    out = project_bucket(project, panel_s3)
    response = owner_api.post(
        "/api/v1/jobs/",
        {
            "name": "bert",
            "image": "registry.example.com/train:1",
            "flavor": "h100-1-gpu",
            "gpu": 2,
            "command": ["python", "train.py", "--epochs", "3"],
            "volumes": [
                f"{data_bucket.name}@LOCAL/ds:/workspace/data",
                f"{out.name}@LOCAL/run:/workspace/output:rw",
            ],
            "env": {"SEED": "1"},
            "labels": {"team": "nlp"},
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]
    job = Job.objects.get(pk=job_id)
    kubelet = k8s_cluster.kubelet
    pod = wait_for(lambda: job_pods(k8s_cluster, job), 60, "the pod", procs)[0]["metadata"]["name"]

    kubelet.unschedulable(NS, pod, "0/12 nodes are available: 12 Insufficient nvidia.com/gpu.")
    wait_for(
        lambda: (
            state_of(job_id)[0] == S.PENDING
            and "Insufficient nvidia.com/gpu" in state_of(job_id)[1]
        ),
        30,
        "PENDING",
        procs,
    )

    kubelet.run(NS, pod)
    kubelet.log(NS, pod, "loading data", "step 1 loss 2.0")
    wait_for(lambda: state_of(job_id)[0] == S.RUNNING, 30, "RUNNING", procs)

    def texts() -> list[str]:  # what the watcher's log collector stored, read by the API
        lines = owner_api.get(f"/api/v1/jobs/{job_id}/logs/?after=0").json()["lines"]
        return [x["text"] for x in lines]

    wait_for(lambda: len(texts()) == 2, 30, "the collected log lines", procs)
    assert texts() == ["loading data", "step 1 loss 2.0"]

    kubelet.finish(NS, pod, exit_code=0)
    push = names.push_job_name(job_ref(job), 1)
    wait_for(lambda: k8s_cluster.pods_of(NS, push), 30, "the push pod", procs)
    wait_for(lambda: state_of(job_id)[0] == S.FINALIZING, 30, "FINALIZING", procs)
    kubelet.finish(NS, k8s_cluster.pod_of(NS, push))
    wait_for(lambda: state_of(job_id)[0] == S.DONE, 30, "DONE", procs)
    wait_for(lambda: Job.objects.get(pk=job_id).logs_archived, 30, "the log archive", procs)
    body = owner_api.get(f"/api/v1/jobs/{job_id}/").json()
    history = [(h["state"], h["reason"]) for h in body["history"]]
    changes = [s for i, (s, _) in enumerate(history) if not i or s != history[i - 1][0]]
    assert changes == ["QUEUED", "PENDING", "RUNNING", "FINALIZING", "DONE"]
    # The scheduler's verdict is kept although the job was PENDING before it came.
    assert any("Insufficient nvidia.com/gpu" in reason for _, reason in history)
    assert body["exit_code"] == 0 and body["started_at"] and body["finished_at"]
    logs = owner_api.get(f"/api/v1/jobs/{job_id}/logs/?after=0").json()
    assert logs["eof"] and len(logs["lines"]) == 2


def test_faults_converge_to_one_pod_and_the_right_state(
    processes: Any,
    cluster_env: dict[str, str],
    k8s_cluster: Any,
    owner_api: APIClient,
    project: Project,
    panel_s3: Any,
) -> None:
    """Duplicate task delivery, a worker killed between creating the objects and saving the
    row, and the watch dropped mid-run: one pod, and the correct final state."""
    first = processes(cluster_env)
    first.worker("worker-a")
    response = owner_api.post(
        "/api/v1/jobs/", {"image": "x/y:1", "flavor": "l4-1-gpu", "command": ["run"]}, format="json"
    )
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    wait_for(lambda: job_pods(k8s_cluster, job), 60, "the pod", first)
    first.kill("worker-a")
    # What the row looks like when the worker died after creating the objects, before saving.
    Job.objects.filter(pk=job.pk).update(launched_run=0, state=S.QUEUED, state_reason="")
    for _ in range(2):  # the same task delivered twice
        tasks.job_reconcile.delay(str(job.pk))

    second = processes(cluster_env)
    second.worker("worker-b")
    second.beat()
    second.watcher()
    pod = job_pods(k8s_cluster, job)[0]["metadata"]["name"]
    k8s_cluster.kubelet.run(NS, pod)
    wait_for(lambda: state_of(str(job.pk))[0] == S.RUNNING, 30, "RUNNING", second)
    second.kill("watcher")  # the watch drops; the beat sweep alone must converge
    k8s_cluster.kubelet.finish(NS, pod, exit_code=1, message="CUDA error: out of memory")
    wait_for(lambda: state_of(str(job.pk))[0] == S.FAILED, 30, "FAILED", second)
    assert state_of(str(job.pk))[1] == "exit code 1: CUDA error: out of memory"
    assert len(k8s_cluster.list("jobs", NS)) == 1
    assert len(job_pods(k8s_cluster, job)) == 1
