"""The sweep cleans up after apps (#16): the objects of an app whose row is gone (a
Deployment, its ReplicaSets and pods, the Service, the Ingress, the HorizontalPodAutoscaler or
KEDA's ScaledObject; locally, the server's processes) are deleted once the grace period has
passed; an app that ended (FAILED, ERROR, STOPPED) with replicas still up is stopped, its
address kept. Another project's live app, and anything younger than the grace, is left alone.
Each orphan is made first, the way it happens: the objects exist, then the row goes. The grace of
objects no row names counts from the sweep that first noticed them (engine/orphans.py)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.buckets.models import Bucket
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.lifecycle import record_state
from controlpanel.engine.models import Orphan, Workload
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.services import app_create
from controlpanel.served.states import AppState
from deploy.local import LocalBackend
from deploy.local.paths import run_dir
from deploy.local.plan import ref_dict
from deploy.local.state import now_iso, process_start_ticks, read_state, write_json
from deploy.types import WorkloadKind, WorkloadRef
from storage.datastore import DatastoreConfig
from tests.fixtures.jobs import access_for, project_bucket, put_weights

A = AppState
LONG_AGO = timedelta(minutes=10)
# What an app is made of on the cluster, by the emulator's plural names.
APP_OBJECTS = ("deployments", "services", "ingresses", "replicasets", "pods")
AUTOSCALERS = ("horizontalpodautoscalers", "scaledobjects")


def deploy(project: Project, user: Any, bucket: Bucket, **scaling: Any) -> App:
    data = {
        "name": "bot",
        "flavor": "ai1-1-cpu",
        "model": f"{bucket.name}@LOCAL/tiny-llama",
        "model_name": "bot",
        **scaling,
    }
    app = app_create(access=access_for(project), user=user, data=data)
    admit_jobs(project_id=project.pk)
    reconcile(str(app.pk))
    return app


def serve(cluster: Any, app: App) -> None:
    for pod in cluster.pods_of_deployment(app.project.namespace, f"app-{app.pk}"):
        cluster.kubelet.run(app.project.namespace, pod["metadata"]["name"])


def objects_of(cluster: Any, app: App) -> dict[str, int]:
    """How many objects of each kind the cluster holds for the app (by its id label)."""
    found: dict[str, int] = {}
    for plural in (*APP_OBJECTS, *AUTOSCALERS):
        for obj in cluster.list(plural, app.project.namespace):
            if (obj["metadata"].get("labels") or {}).get("ajuste.io/id") == str(app.pk):
                found[plural] = found.get(plural, 0) + 1
    return found


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_the_sweep_deletes_what_a_deleted_app_left_and_stops_an_ended_one(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    other_project: Project,
    owner: Any,
    outsider: Any,
    data_bucket: Bucket,
    panel_s3: DatastoreConfig,
    settings: Any,
) -> None:
    their_bucket = project_bucket(other_project, panel_s3)
    put_weights(panel_s3, their_bucket.name)
    theirs = deploy(other_project, outsider, their_bucket)
    serve(k8s_cluster, theirs)

    k8s_cluster.store.clock_offset = -LONG_AGO  # what is made now looks ten minutes old
    cpu = deploy(project, owner, data_bucket, scaling="cpu", max_replicas=3, target_cpu=70)
    settings.APP_KEDA = True  # KEDA installed: its ScaledObject scales the next one
    keda = deploy(project, owner, data_bucket, scaling="rps", min_replicas=0, target_rps=5)
    failed = deploy(project, owner, data_bucket)
    for app in (cpu, keda, failed):
        serve(k8s_cluster, app)
    k8s_cluster.store.clock_offset = timedelta()
    young = deploy(project, owner, data_bucket)  # made a moment ago
    serve(k8s_cluster, young)
    sweep()
    for app in (theirs, cpu, keda, failed, young):
        app.refresh_from_db()
        assert app.state == A.RUNNING, app.state_reason
    assert objects_of(k8s_cluster, cpu)["horizontalpodautoscalers"] == 1
    assert objects_of(k8s_cluster, keda)["scaledobjects"] == 1
    before = {app.pk: objects_of(k8s_cluster, app) for app in (theirs, young)}

    # The rows go without the cluster (a reconcile rolled back, a row removed by hand).
    Workload.objects.filter(pk__in=[cpu.pk, keda.pk, young.pk]).delete()
    # One ends with its replicas still serving (its stop never reached the cluster).
    record_state(failed, A.FAILED, "the server exits (exit code 1)")
    Workload.objects.filter(pk=failed.pk).update(state_changed_at=timezone.now() - LONG_AGO)

    assert sweep()["orphans"] == 1  # the ended one; those no row names are noted
    assert {o.workload_id for o in Orphan.objects.all()} == {
        str(cpu.pk),
        str(keda.pk),
        str(young.pk),
    }
    Orphan.objects.exclude(workload_id=str(young.pk)).update(noticed_at=timezone.now() - LONG_AGO)
    assert sweep()["orphans"] == 2
    k8s_cluster.reconcile()
    assert objects_of(k8s_cluster, cpu) == {}
    assert objects_of(k8s_cluster, keda) == {}
    left = objects_of(k8s_cluster, failed)
    assert left.get("pods", 0) == 0 and left["services"] == 1  # its address kept
    deployment = k8s_cluster.get("deployments", project.namespace, f"app-{failed.pk}")
    assert deployment["spec"]["replicas"] == 0
    # Another project's live app and an orphan within its grace period are untouched.
    for app in (theirs, young):
        assert objects_of(k8s_cluster, app) == before[app.pk]
    theirs.refresh_from_db()
    assert theirs.state == A.RUNNING
    assert sweep()["orphans"] == 0  # nothing left to collect


@pytest.mark.django_db(transaction=True)
def test_the_sweep_ends_the_server_of_a_deleted_local_app(
    local_jobs: LocalBackend, project: Project, tmp_path: Path
) -> None:
    """The local backend: the app's run directory names a live supervisor (a stand-in
    process here) and no row claims it: the process is killed and the directory goes."""
    ref = WorkloadRef(WorkloadKind.APP, project.slug, project.namespace, str(uuid.uuid4()))
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        run = run_dir(local_jobs.base, ref)
        run.mkdir(parents=True)
        long_ago = (timezone.now() - LONG_AGO).isoformat()
        state = {
            "phase": "RUNNING",
            "reason": "ready",
            "ref": ref_dict(ref),
            "run_uid": "r1",
            "created_at": long_ago,
            "started_at": long_ago,
            "updated_at": now_iso(),
            "supervisor_pid": server.pid,
            "supervisor_started": process_start_ticks(server.pid),
        }
        write_json(run / "state.json", state)
        assert read_state(run) is not None
        assert sweep()["orphans"] == 0  # noted: its grace counts from now
        Orphan.objects.update(noticed_at=timezone.now() - LONG_AGO)
        assert sweep()["orphans"] == 1
        assert server.wait(timeout=30) == -9  # SIGKILL
        assert not run.exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
