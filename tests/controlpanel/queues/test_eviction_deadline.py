"""An evicted pod seen terminating that then goes unseen is billed to its deletion's deadline
(its deletionTimestamp, kept on its run as `ends_by`), not to Kueue's Evicted time, which is
up to one grace period early: the one rule of `replicas.gone_at`, for a one-node Job's pod as
for a replica. Billing layer first, then the emulator's Kueue with the cluster's clock 30
minutes behind the panel's (an end taken when the panel noticed would bill 30 minutes more)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.lifecycle import apply_observation
from controlpanel.engine.models import JobRun
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.replicas import gone_at
from controlpanel.engine.tasks import sweep_now
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from deploy import names
from deploy.kubernetes.pods import parse_time
from tests.controlpanel.queues.test_eviction_metering import (
    beta_borrows,
    billed_minutes,
    requeued,
    running,  # noqa: F401 (a fixture)
)
from tests.fixtures.jobs import submit
from tests.fixtures.k8s import kueue_on

BEHIND = timedelta(minutes=30)


@pytest.mark.django_db
def test_a_pod_seen_terminating_then_gone_is_billed_to_its_deadline_not_the_eviction(
    running: tuple[Job, JobRun],  # noqa: F811
) -> None:
    job, run = running
    evicted = run.started_at + timedelta(minutes=5)
    deadline = evicted + timedelta(minutes=2, seconds=30)  # its grace period: it saves
    seen = requeued(
        job, evicted_at=evicted, run_uid="pod-1", started_at=run.started_at, ends_by=deadline
    )
    assert apply_observation(job, seen, fresh=True)
    run.refresh_from_db()
    assert run.finished_at is None and run.ends_by == deadline  # still metered
    apply_observation(job, requeued(job, evicted_at=evicted), fresh=True)  # gone, end unseen
    run.refresh_from_db()
    assert run.finished_at == deadline  # not the eviction, nor the panel's now
    assert billed_minutes(run) == 8  # 7 min 30 s: eight started minutes


@pytest.mark.django_db
def test_a_pod_gone_before_its_deadline_ends_at_the_eviction(
    running: tuple[Job, JobRun],  # noqa: F811
) -> None:
    """Gone while its deadline is still ahead: it ended by itself, some time after Kueue
    evicted it, so it is billed to the eviction (no minute after its end, and none over the
    next pod Kueue may start in the same second), not to its deadline nor to now."""
    job, run = running
    evicted = run.started_at + timedelta(minutes=5)
    ahead = timezone.now() + timedelta(hours=1)
    seen = requeued(
        job, evicted_at=evicted, run_uid="pod-1", started_at=run.started_at, ends_by=ahead
    )
    apply_observation(job, seen, fresh=True)
    apply_observation(job, requeued(job, evicted_at=evicted), fresh=True)
    run.refresh_from_db()
    assert run.finished_at == evicted


@pytest.mark.django_db
def test_a_deadline_ahead_with_no_eviction_known_ends_at_now(
    running: tuple[Job, JobRun],  # noqa: F811
) -> None:
    """No eviction time to bound it (a replica gone unseen): the panel's now, never the
    deadline ahead of it."""
    _, run = running
    ahead = timezone.now() + timedelta(hours=1)
    run.ends_by = ahead
    run.save(update_fields=["ends_by"])
    before = timezone.now()
    end = gone_at(run, timezone.now())
    assert before <= end <= timezone.now()


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_an_evicted_pod_killed_after_its_grace_is_billed_to_its_deletion_deadline(
    k8s_cluster: Any,
    k8s_jobs: Any,
    settings: Any,
    project: Project,
    other_project: Project,
    owner: Any,
) -> None:
    """Beta's borrowing job is preempted by alpha's; it ignores SIGTERM (saving), the sweep
    sees it terminating, then it is killed at its grace's end and gone before the next sweep."""
    kueue_on(k8s_cluster, settings)
    k8s_cluster.advance(-BEHIND.total_seconds())
    theirs = beta_borrows(k8s_cluster, project, other_project, owner)
    k8s_cluster.advance(5 * 60)
    k8s_cluster.kubelet.ignore_sigterm = True
    ours = submit(project, owner, name="alpha-0")
    admit_jobs(project_id=project.pk)
    reconcile(str(ours.pk))
    sweep_now()
    [preempted] = Job.objects.filter(pk__in=[j.pk for j in theirs], state="QUEUED")
    [dying] = k8s_cluster.pods_of(other_project.namespace, names.job_name(job_ref(preempted)))
    deadline = parse_time(dying["metadata"]["deletionTimestamp"])
    grace = int(dying["metadata"]["deletionGracePeriodSeconds"])
    [run] = JobRun.objects.filter(job=preempted)
    assert run.finished_at is None and run.ends_by == deadline  # saving: still metered
    k8s_cluster.advance(grace)  # killed (137) and gone, unseen
    assert k8s_cluster.get("pods", other_project.namespace, dying["metadata"]["name"]) is None
    sweep_now()
    run.refresh_from_db()
    assert deadline is not None and grace > 0
    assert run.finished_at == deadline  # a grace period after Kueue's Evicted time
    assert timezone.now() - run.finished_at > timedelta(minutes=15)  # the panel: later
    minutes = (deadline - run.started_at).total_seconds() / 60
    assert billed_minutes(run) == int(minutes) + (minutes % 1 > 0)
