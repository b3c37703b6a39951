"""A healthy node's pod deleted by a JobSet group restart (issue 29) is metered to its own end,
not to when the panel notices it gone: while it terminates its run keeps the deletion's
deadline (`ends_by`, its deletionTimestamp), and the watcher's DELETED event of the pod of the
earlier attempt gives its container's own finish. Billing layer first, then the emulator with
the cluster's clock 30 minutes behind the panel's (a late observation would bill 30 minutes
more)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F, Sum
from django.utils import timezone

from controlpanel.billing.models import Line
from controlpanel.engine.backend import job_ref
from controlpanel.engine.lifecycle import apply_observation, record_state
from controlpanel.engine.models import JobRun
from controlpanel.engine.replicas import record_replicas
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from deploy.kubernetes.listing import MANAGED
from deploy.kubernetes.pods import parse_time
from deploy.types import ReplicaRun
from tests.controlpanel.jobs.test_k8s_journey import start
from tests.controlpanel.jobs.test_k8s_multinode import BODY, NS, URL, live_pods
from tests.deploy.kueue_objects import need_schemas
from tests.fixtures.jobs import submit
from tests.fixtures.k8s_emulator import crds

pytestmark = pytest.mark.k8s
BEHIND = timedelta(minutes=30)


def billed(run: JobRun) -> int:
    lines = Line.objects.filter(run=run, period=F("of_period"))
    return int(lines.aggregate(m=Sum("minutes"))["m"] or 0)


@pytest.fixture
def group(k8s_jobs: Any, project: Project, owner: Any) -> tuple[Job, Any]:
    """A 2-node job RUNNING, node 0's pod started ten minutes ago."""
    job = submit(project, owner, gpu=1, nodes=2)
    record_state(job, "RUNNING", "running on 2 nodes")
    return job, timezone.now().replace(microsecond=0) - timedelta(minutes=10)


@pytest.mark.django_db
def test_a_pod_gone_after_it_was_seen_terminating_ends_at_its_deletion_deadline(
    group: tuple[Job, Any],
) -> None:
    job, started = group
    record_replicas(job, (ReplicaRun("node-0", started),), serving=True)
    deadline = started + timedelta(minutes=4, seconds=30)  # 5.5 minutes before "now"
    terminating = ReplicaRun("node-0", started, ends_by=deadline)
    record_replicas(job, (terminating,), serving=True)
    run = JobRun.objects.get(uid="node-0")
    assert run.finished_at is None and run.ends_by == deadline  # still billed as it runs
    record_replicas(job, (), serving=True)  # the next observation: gone, its end unseen
    run.refresh_from_db()
    assert run.finished_at == deadline  # not when the panel saw it gone
    assert billed(run) == 5  # 4 min 30 s: five started minutes, none after


@pytest.mark.django_db
def test_a_deadline_in_the_panels_future_and_a_pod_never_seen_terminating_end_at_now(
    group: tuple[Job, Any],
) -> None:
    job, started = group
    ahead = timezone.now() + timedelta(hours=1)  # a cluster clock ahead of the panel's
    record_replicas(
        job,
        (ReplicaRun("node-0", started, ends_by=ahead), ReplicaRun("node-1", started)),
        serving=True,
    )
    before = timezone.now()
    record_replicas(job, (), serving=True)
    for uid in ("node-0", "node-1"):
        run = JobRun.objects.get(uid=uid)
        assert run.finished_at is not None and before <= run.finished_at <= timezone.now()


def _group_running(cluster: Any, api: Any) -> tuple[Job, list[str]]:
    """A 2-node job through the API, both nodes running, the cluster 30 min behind."""
    need_schemas(crds.JOBSET)
    cluster.install_jobset()
    cluster.advance(-BEHIND.total_seconds())
    answer = api.post(URL, BODY, "json")
    assert answer.status_code == 201, answer.json()
    job = start(Job.objects.get(pk=answer.json()["id"]))
    pods = live_pods(cluster, job)
    assert len(pods) == 2
    for pod in pods:
        cluster.kubelet.run(NS, pod)
    sweep()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == ("RUNNING", "running on 2 nodes")
    cluster.advance(300)  # five minutes of training
    return job, sorted(pods)


def _run_of(cluster: Any, pod: str) -> JobRun:
    return JobRun.objects.get(uid=cluster.get("pods", NS, pod)["metadata"]["uid"])


def test_the_healthy_node_deleted_by_the_restart_is_billed_to_its_deletion_deadline(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner_api: Any, panel_s3: Any
) -> None:
    """Node 0 ignores SIGTERM: it terminates for its grace period; the sweep sees it so, then
    it is killed and gone. Its run ends at its deletionTimestamp, 30 min before the panel's
    now, and bills its own minutes only."""
    k8s_cluster.kubelet.ignore_sigterm = True
    job, (node0, node1) = _group_running(k8s_cluster, owner_api)
    healthy = _run_of(k8s_cluster, node0)
    k8s_cluster.kubelet.finish(NS, node1, exit_code=1, message="NCCL watchdog timeout")
    terminating = k8s_cluster.get("pods", NS, node0)
    deadline = parse_time(terminating["metadata"]["deletionTimestamp"])
    assert deadline is not None and terminating["status"]["phase"] == "Running"
    sweep()
    healthy.refresh_from_db()
    assert healthy.finished_at is None and healthy.ends_by == deadline
    grace = int(terminating["metadata"]["deletionGracePeriodSeconds"])
    k8s_cluster.advance(grace)  # killed (exit 137) and gone
    assert k8s_cluster.get("pods", NS, node0) is None
    sweep()
    job.refresh_from_db()
    assert job.state == "RUNNING" and "restart 1 of 2" in job.state_reason
    healthy.refresh_from_db()
    assert healthy.finished_at == deadline <= k8s_cluster.store.now()  # its own clock
    assert timezone.now() - healthy.finished_at > timedelta(minutes=15)  # the panel: later
    minutes = (deadline - healthy.started_at).total_seconds() / 60
    assert billed(healthy) == int(minutes) + (minutes % 1 > 0) < 30


def test_the_watchers_deleted_event_of_the_earlier_attempt_gives_the_pods_own_end(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner_api: Any, panel_s3: Any
) -> None:
    """Node 0 stops on SIGTERM at once (exit 143) and is gone before any sweep: the watcher's
    DELETED event carries its last state, and its run ends at its container's finish."""
    job, (node0, node1) = _group_running(k8s_cluster, owner_api)
    healthy = _run_of(k8s_cluster, node0)
    uid = healthy.uid
    version = k8s_jobs.api.list("Pod", NS, label_selector=MANAGED)[1]
    k8s_cluster.kubelet.finish(NS, node1, exit_code=1, message="NCCL watchdog timeout")
    assert k8s_cluster.get("pods", NS, node0) is None  # gone in the restart's reconcile
    events = k8s_jobs.api.watch(
        "Pod", NS, label_selector=MANAGED, resource_version=version, timeout_s=1
    )
    [deleted] = [
        e["object"]
        for e in events
        if e.get("type") == "DELETED" and e["object"]["metadata"].get("uid") == uid
    ]
    [main] = [c for c in deleted["status"]["containerStatuses"] if c["name"] == "main"]
    finished = parse_time(main["state"]["terminated"]["finishedAt"])
    assert main["state"]["terminated"]["exitCode"] == 143 and finished is not None
    job.refresh_from_db()
    observed = k8s_jobs._observe_after_event(job_ref(job), deleted)
    assert uid in {r.uid for r in observed.replica_runs or () if r.finished_at == finished}
    apply_observation(job, observed)
    healthy.refresh_from_db()
    assert healthy.finished_at == finished <= k8s_cluster.store.now()
    assert timezone.now() - healthy.finished_at > timedelta(minutes=15)  # the panel: later
    assert healthy.exit_code == 143
    assert billed(healthy) in (5, 6)  # its five minutes of training, not the 30 behind
