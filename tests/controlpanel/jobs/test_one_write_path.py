"""One write path for every kind (#24): a new run resets the same run-scoped fields whatever the
kind (a job's "run again", a notebook's or an app's start), and a stop with a reason (the budget
stop's) stops every kind, apps included: a project over its budget that chose "stop running
work" keeps nothing running, and billed, past it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.billing.tasks import billing_catch_up, budget_check_task
from controlpanel.buckets.models import Bucket
from controlpanel.engine import curves
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.models import JobRun, Workload
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.services import job_rerun
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.services import notebook_start
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.services import app_create, app_start
from tests.fixtures.jobs import access_for
from tests.fixtures.panel import api_client_for

pytestmark = pytest.mark.django_db

# A finished run of each kind, in a state that kind may start again from; its restart service
# and the REST API's action that calls it.
KINDS = {
    "job": (Job, "DONE", job_rerun, "job", "jobs/{}/rerun/"),
    "notebook": (Notebook, "STOPPED", notebook_start, "notebook", "notebooks/{}/start/"),
    "app": (App, "STOPPED", app_start, "app", "apps/{}/start/"),
}
# What one run leaves on the row: none of it may leak into the next run.
RAN = {
    "progress": {"step": 40, "total_steps": 100, "replicas": [1, 1]},
    "log_cursor": "2025-01-01T00:00:00Z 1234",
    "log_lines": 3,
    "logs_archived": True,
    "exit_code": 0,
}
CURVE = [[10, 2.5], [40, 1.25]]
RESET = {
    "progress": {},
    "loss_curve": [],
    "log_cursor": "",
    "log_lines": 0,
    "logs_archived": False,
    "exit_code": None,
    "admitted_at": None,
    "started_at": None,
    "finished_at": None,
    "last_activity_at": None,
    "stop_requested": False,
    "run": 2,
}


def finished(kind: str, project: Project, owner: Any) -> Workload:
    model, state, *_ = KINDS[kind]
    now = timezone.now()
    workload = model.objects.create(
        project=project,
        owner=owner,
        name=f"a-{kind}",
        image="x/y:1",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        volumes=["b@LOCAL/m:/workspace/model:ro"] if kind == "app" else [],
        params={"model": "b@LOCAL/m", "model_name": "m"} if kind == "app" else {},
        state=state,
        admitted_at=now - timedelta(hours=2),
        started_at=now - timedelta(hours=2),
        finished_at=now - timedelta(hours=1),
        last_activity_at=now - timedelta(hours=1),
        launched_run=1,
        stop_requested=True,
        **RAN,
    )
    curves.replace(workload, CURVE)
    assert workload.loss_curve == CURVE
    return workload


def run_scoped(workload: Workload) -> dict[str, Any]:
    workload.refresh_from_db()
    return {name: getattr(workload, name) for name in RESET}


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_run_starts_from_nothing_for_every_kind(
    kind: str, project: Project, owner: Any
) -> None:
    workload = finished(kind, project, owner)
    start = KINDS[kind][2]
    start(access=access_for(project), user=owner, **{KINDS[kind][3]: workload})
    assert run_scoped(workload) == RESET


@pytest.mark.parametrize("kind", KINDS)
def test_the_apis_start_resets_the_same_fields_for_every_kind(
    kind: str, project: Project, owner: Any
) -> None:
    workload = finished(kind, project, owner)
    answer = api_client_for(owner).post(f"/api/v1/{KINDS[kind][4].format(workload.pk)}")
    assert answer.status_code == 200, answer.content
    assert run_scoped(workload) == RESET


def over_budget(project: Project, owner: Any) -> None:
    """The project's month past its budget of 0.01, with "stop running work" chosen: an
    earlier job ran an hour on a priced flavor (the receivers bill it as the run is saved)."""
    project.monthly_budget = "0.01"
    project.budget_stops_running = True
    project.save()
    flavor = Flavor.objects.get(name="h100-1-gpu")
    earlier = Job.objects.create(
        project=project, owner=owner, name="earlier", image="x/y:1", flavor=flavor, state="DONE"
    )
    now = timezone.now()
    JobRun.objects.create(
        uid="pod-earlier",
        job=earlier,
        project=project,
        run=1,
        flavor=flavor,
        units=1,
        started_at=now - timedelta(minutes=61),
        finished_at=now - timedelta(minutes=1),
    )


def serving(kind: str, project: Project, owner: Any) -> Workload:
    workload = finished(kind, project, owner)
    running = {"job": "RUNNING", "notebook": "RUNNING", "app": "RUNNING"}[kind]
    type(workload).objects.filter(pk=workload.pk).update(
        state=running, stop_requested=False, finished_at=None
    )
    workload.refresh_from_db()
    return workload


def test_the_budget_stop_stops_every_kind_apps_included(project: Project, owner: Any) -> None:
    over_budget(project, owner)
    live = {kind: serving(kind, project, owner) for kind in KINDS}
    budget_check_task(project.pk)
    stopping = {"job": "INTERRUPTING", "notebook": "STOPPING", "app": "STOPPING"}
    for kind, workload in live.items():
        workload.refresh_from_db()
        assert (kind, workload.stop_requested, workload.state) == (kind, True, stopping[kind])
        assert workload.state_reason.startswith("stopped: Budget of 0.01 "), workload.state_reason


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_an_app_over_its_projects_budget_stops_serving_on_the_cluster(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: Any, data_bucket: Bucket
) -> None:
    model = f"{data_bucket.name}@LOCAL/tiny-llama"
    app = app_create(
        access=access_for(project), user=owner, data={"flavor": "ai1-1-cpu", "model": model}
    )
    admit_jobs(project_id=project.pk)
    reconcile(str(app.pk))
    deployment = f"app-{app.pk}"
    for pod in k8s_cluster.pods_of_deployment("ajuste-alpha", deployment):
        k8s_cluster.kubelet.run("ajuste-alpha", pod["metadata"]["name"])
    sweep()
    app.refresh_from_db()
    assert app.state == "RUNNING", app.state_reason
    over_budget(project, owner)
    billing_catch_up()  # the periodic check: the budget is reached, running work stops
    reconcile(str(app.pk))  # what the stop enqueued
    k8s_cluster.reconcile()  # the kubelet stops its pods
    sweep()
    app.refresh_from_db()
    assert app.state == "STOPPED"
    said = app.events.filter(state="STOPPING").values_list("reason", flat=True)
    assert [r for r in said if r.startswith("stopped: Budget of 0.01 ")], list(said)
    assert k8s_cluster.get("deployments", "ajuste-alpha", deployment)["spec"]["replicas"] == 0
    assert k8s_cluster.pods_of_deployment("ajuste-alpha", deployment) == []
