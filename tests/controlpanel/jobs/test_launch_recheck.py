"""Volume specs are checked at submit, but a run launches later ("run again", a long queue):
by then the bucket may be gone and its name taken by another project. Every launch checks
again, and a run whose volume is no longer its project's ends FAILED with the reason and
creates nothing (issue 11)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from controlpanel.buckets import services as buckets
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.datastores import launch_refusal
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.jobs.models import Job
from controlpanel.jobs.services import job_rerun, job_retry_push
from controlpanel.jobs.states import JobState
from controlpanel.projects.access import project_access
from controlpanel.projects.models import Project
from deploy import names
from storage import objects
from storage.datastore import DatastoreConfig
from tests.fixtures.jobs import access_for, project_bucket, submit

pytestmark = pytest.mark.k8s
NS = "ajuste-alpha"
S = JobState


def _finish_run(cluster: Any, job: Job) -> Job:
    """Launch the job's current run and take it to DONE through the emulator's kubelet."""
    assert admit_jobs(project_id=job.project_id) == [str(job.pk)]
    reconcile(str(job.pk))
    pod = cluster.pod_of(NS, names.job_name(job_ref(job)))
    cluster.kubelet.run(NS, pod)
    cluster.kubelet.finish(NS, pod, exit_code=0)
    sweep()
    job.refresh_from_db()
    cluster.kubelet.finish(NS, cluster.pod_of(NS, names.push_job_name(job_ref(job), 1)))
    sweep()
    job.refresh_from_db()
    assert job.state == S.DONE, job.state_reason
    return job


def _k8s_jobs(cluster: Any) -> set[str]:
    return {item["metadata"]["name"] for item in cluster.list("jobs", NS)}


def test_run_again_after_the_bucket_changed_hands_creates_nothing(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    outsider: Any,
    other_project: Project,
    panel_s3: DatastoreConfig,
    settings: Any,
) -> None:
    settings.S3_CORS_ORIGINS = []
    data = project_bucket(project, panel_s3)
    out = project_bucket(project, panel_s3)
    job = submit(
        project,
        owner,
        volumes=[
            f"{data.name}@LOCAL/dataset:/workspace/data:ro",
            f"{out.name}@LOCAL/output:/workspace/output:rwd",
        ],
    )
    job = _finish_run(k8s_cluster, job)
    before = _k8s_jobs(k8s_cluster)

    # alpha deletes its output bucket; beta creates one of that name and fills it.
    buckets.bucket_delete(access=access_for(project), bucket=out)
    beta = project_access(user=outsider, slug="beta")
    buckets.bucket_create(access=beta, by=outsider, name=out.name)
    objects.put_object(panel_s3, bucket=out.name, key="output/theirs.bin", data=b"beta's")

    job = job_rerun(access=access_for(project), user=owner, job=job)
    assert admit_jobs(project_id=project.pk) == [str(job.pk)]
    reconcile(str(job.pk))
    job.refresh_from_db()
    assert job.run == 2 and job.state == S.FAILED
    assert job.state_reason == (
        f"not started: volume 2: bucket {out.name}@LOCAL is no longer this project's"
    )
    assert job.launched_run == 1
    assert _k8s_jobs(k8s_cluster) == before  # no Job, no pod for run 2
    sweep()
    reconcile(str(job.pk))
    assert _k8s_jobs(k8s_cluster) == before
    kept = [o.key for o in objects.iter_objects(panel_s3, bucket=out.name)]
    assert kept == ["output/theirs.bin"]


def test_a_queued_job_whose_bucket_was_detached_fails_at_admission_time(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, panel_s3: DatastoreConfig
) -> None:
    data = project_bucket(project, panel_s3)
    job = submit(project, owner, volumes=[f"{data.name}@LOCAL/x:/workspace/data"])
    data.delete()  # detached (an attached bucket's row only) while the job waited
    admit_jobs(project_id=project.pk)
    reconcile(str(job.pk))
    job.refresh_from_db()
    assert job.state == S.FAILED
    assert job.state_reason == (
        f"not started: volume 1: bucket {data.name}@LOCAL is no longer this project's"
    )
    assert _k8s_jobs(k8s_cluster) == set()


def test_launch_refusal_names_the_volume_and_why(
    project: Project, other_project: Project, panel_s3: DatastoreConfig
) -> None:
    ours = project_bucket(project, panel_s3)
    theirs = project_bucket(other_project, panel_s3)
    assert launch_refusal(project=project, volumes=[f"{ours.name}@LOCAL:/workspace/a"]) is None
    assert (
        launch_refusal(
            project=project,
            volumes=[f"{ours.name}@LOCAL:/workspace/a", f"{theirs.name}@LOCAL:/workspace/b"],
        )
        == f"volume 2: bucket {theirs.name}@LOCAL is no longer this project's"
    )
    assert launch_refusal(project=project, volumes=[f"{ours.name}@GRA:/workspace/a"]) == (
        "volume 1: the datastore GRA is no longer configured"
    )


def test_a_bucket_taken_during_the_run_gets_no_push_and_no_retried_push(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    outsider: Any,
    other_project: Project,
    panel_s3: DatastoreConfig,
    settings: Any,
) -> None:
    """The final push is a launch too: a bucket detached and taken while the run ran gets
    no push (SYNC_FAILED, the workspace kept), and the push cannot be retried into it."""
    settings.S3_CORS_ORIGINS = []
    out = project_bucket(project, panel_s3)
    job = submit(project, owner, volumes=[f"{out.name}@LOCAL/output:/workspace/output:rwd"])
    assert admit_jobs(project_id=job.project_id) == [str(job.pk)]
    reconcile(str(job.pk))
    pod = k8s_cluster.pod_of(NS, names.job_name(job_ref(job)))
    k8s_cluster.kubelet.run(NS, pod)
    sweep()

    buckets.bucket_delete(access=access_for(project), bucket=out)
    beta = project_access(user=outsider, slug="beta")
    buckets.bucket_create(access=beta, by=outsider, name=out.name)
    objects.put_object(panel_s3, bucket=out.name, key="output/theirs.bin", data=b"beta's")
    reconcile(str(job.pk))  # while it runs: nothing changes
    job.refresh_from_db()
    assert job.state == S.RUNNING

    k8s_cluster.kubelet.finish(NS, pod, exit_code=0)
    sweep()
    job.refresh_from_db()
    assert job.state == S.SYNC_FAILED
    assert job.state_reason == (
        f"push not started: volume 1: bucket {out.name}@LOCAL is no longer this project's"
    )
    push = names.push_job_name(job_ref(job), 1)
    assert push not in _k8s_jobs(k8s_cluster)
    with pytest.raises(ValidationError, match="The push cannot be retried: volume 1: bucket"):
        job_retry_push(access=access_for(project), user=owner, job=job)
    job.refresh_from_db()
    assert job.state == S.SYNC_FAILED
    kept = [o.key for o in objects.iter_objects(panel_s3, bucket=out.name)]
    assert kept == ["output/theirs.bin"]
