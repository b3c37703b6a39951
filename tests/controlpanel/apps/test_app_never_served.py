"""Only RUNNING time is billed (#32): an app whose server started but failed before it served
(a missing model folder) is billed nothing; one that goes on to serve bills from its server's
start, as before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlpanel.billing.models import Line
from controlpanel.engine.lifecycle import apply_observation
from controlpanel.engine.models import JobRun, Kind, Workload
from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.served.states import AppState
from deploy.types import ObservedWorkload, Phase, ReplicaRun, WorkloadKind

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def app(project: Project, owner: Any) -> Workload:
    return Workload.objects.create(
        kind=Kind.APP,
        project=project,
        owner=owner,
        name="bot",
        image="serving:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=AppState.INITIALIZING,
        admitted_at=T0,
        launched_run=1,
    )


def observe(app: Workload, phase: Phase, replica: ReplicaRun, reason: str = "") -> None:
    app.refresh_from_db()
    seen = ObservedWorkload(
        kind=WorkloadKind.APP,
        id=str(app.pk),
        phase=phase,
        reason=reason,
        replicas=(1 if phase is Phase.RUNNING else 0, 1),
        run_uid=replica.uid,
        started_at=replica.started_at,
        replica_runs=(replica,),
    )
    apply_observation(app, seen)
    app.refresh_from_db()


def test_an_app_that_never_served_is_billed_nothing(app: Workload) -> None:
    loading = ReplicaRun(uid="r1", started_at=T0)
    observe(app, Phase.INITIALIZING, loading, "loading the model")
    assert not JobRun.objects.filter(job=app).exists()
    ended = ReplicaRun(uid="r1", started_at=T0, finished_at=T0 + timedelta(seconds=2), exit_code=2)
    reason = "the server exited (2): the model folder /workspace/model does not exist"
    observe(app, Phase.FAILED, ended, reason)
    assert app.state == AppState.FAILED
    assert not JobRun.objects.filter(job=app).exists()
    assert not Line.objects.filter(run__job=app).exists()


def test_an_app_that_serves_bills_from_its_server_s_start(app: Workload) -> None:
    observe(app, Phase.INITIALIZING, ReplicaRun(uid="r1", started_at=T0), "loading")
    observe(app, Phase.RUNNING, ReplicaRun(uid="r1", started_at=T0), "ready")
    assert app.state == AppState.RUNNING
    ended = ReplicaRun(uid="r1", started_at=T0, finished_at=T0 + timedelta(minutes=3), exit_code=1)
    observe(app, Phase.FAILED, ended, "the server exited (1)")
    run = JobRun.objects.get(job=app)
    assert (run.started_at, run.finished_at) == (T0, T0 + timedelta(minutes=3))
    assert sum(Line.objects.filter(run__job=app).values_list("minutes", flat=True)) == 3
