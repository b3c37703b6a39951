"""A job stopped while its pod initializes, and a job run again after it ran on the emulator:
the panel's services, admission, reconcile and sweep against the Kubernetes emulator, the test
kubelet moving the pods (issue 33's leftovers)."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.engine.models import JobRun
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now
from controlpanel.jobs.models import Job
from controlpanel.jobs.services import job_rerun, job_stop
from controlpanel.jobs.states import JobState
from controlpanel.projects.models import Project
from tests.controlpanel.jobs.test_k8s_journey import NS, pod_of, start, states
from tests.fixtures.jobs import access_for, submit

pytestmark = pytest.mark.k8s
S = JobState


def test_stop_while_initializing_interrupts_and_leaves_no_pod(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, data_bucket: Bucket
) -> None:
    # A read-only volume: the pod pulls it in its init container (INITIALIZING), and a stop
    # has nothing to push.
    volumes = [f"{data_bucket.name}@LOCAL/dataset:/workspace/data:ro"]
    job = start(submit(project, owner, volumes=volumes))
    pod = pod_of(k8s_cluster, job)
    k8s_cluster.kubelet.start_init(NS, pod)
    sweep_now()
    assert Job.objects.get(pk=job.pk).state == S.INITIALIZING

    job_stop(access=access_for(project), user=owner, job=job)
    assert Job.objects.get(pk=job.pk).state == S.INTERRUPTING
    reconcile(str(job.pk))  # what the enqueued task does: ask the cluster to stop
    k8s_cluster.advance(2)  # past the pod's grace period: the kubelet stops it
    sweep_now()
    job.refresh_from_db()
    assert job.state == S.INTERRUPTED, job.state_reason
    assert job.started_at is None  # its code never ran
    seen = states(job)  # each state once, in order (a state may carry several reasons)
    assert [st for n, st in enumerate(seen) if n == 0 or seen[n - 1] != st] == [
        S.QUEUED,
        S.PENDING,
        S.INITIALIZING,
        S.INTERRUPTING,
        S.INTERRUPTED,
    ]
    assert k8s_cluster.list("pods", NS) == []  # nothing left holding the node
    assert not JobRun.objects.filter(job=job).exists()  # its code never ran: nothing metered


def test_a_job_that_ran_on_the_cluster_runs_again_as_a_new_run(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: Any
) -> None:
    job = start(submit(project, owner))
    first_pod = pod_of(k8s_cluster, job)
    k8s_cluster.kubelet.run(NS, first_pod)
    k8s_cluster.kubelet.finish(NS, first_pod, exit_code=0)
    sweep_now()
    job.refresh_from_db()
    assert (job.state, job.run) == (S.DONE, 1)

    job_rerun(access=access_for(project), user=owner, job=job)
    job.refresh_from_db()
    assert (job.state, job.run) == (S.QUEUED, 2)
    job = start(job)
    second_pod = pod_of(k8s_cluster, job)  # the second run's own Job and pod
    assert second_pod != first_pod and "-r2-" in second_pod
    k8s_cluster.kubelet.run(NS, second_pod)
    k8s_cluster.kubelet.finish(NS, second_pod, exit_code=4, message="second run's end")
    sweep_now()
    job.refresh_from_db()
    assert (job.state, job.run, job.exit_code) == (S.FAILED, 2, 4)
    assert job.state_reason == "exit code 4: second run's end"
    runs = JobRun.objects.filter(job=job).order_by("run")
    assert [(r.run, r.exit_code) for r in runs] == [(1, 0), (2, 4)]
    assert all(r.started_at and r.finished_at for r in runs)
