"""Apps through the workload engine on the emulated cluster (#16): the panel's request becomes
a Deployment, Service and Ingress; the observations map to the app's states: QUEUED →
INITIALIZING → RUNNING, SCALING while replicas are short, STOPPING → STOPPED and back at the
same URL; a deleted app leaves nothing behind."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.buckets.models import Bucket
from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now as sweep
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.served.services import app_create, app_delete, app_start, app_stop
from controlpanel.served.states import AppState
from controlpanel.usercontent.domain import parse_content_domain
from deploy import images
from tests.fixtures.jobs import access_for

pytestmark = [pytest.mark.k8s, pytest.mark.django_db(transaction=True)]
NS = "ajuste-alpha"
A = AppState


def pods(k8s_cluster: Any, app: App) -> list[str]:
    return [p["metadata"]["name"] for p in k8s_cluster.pods_of_deployment(NS, f"app-{app.pk}")]


def serve(k8s_cluster: Any, app: App) -> App:
    """Admitted, reconciled, its pods serving, seen by the sweep."""
    admit_jobs(project_id=app.project_id)
    reconcile(str(app.pk))
    for name in pods(k8s_cluster, app):
        k8s_cluster.kubelet.run(NS, name)
    sweep()
    app.refresh_from_db()
    return app


def test_an_app_on_the_cluster_runs_scales_stops_starts_and_goes(
    k8s_cluster: Any,
    k8s_jobs: Any,
    project: Project,
    owner: Any,
    data_bucket: Bucket,
    settings: Any,
) -> None:
    settings.USER_CONTENT_DOMAIN = parse_content_domain("uc.ajuste.example")
    access = access_for(project)
    data = {
        "name": "bot",
        "flavor": "ai1-1-cpu",
        "model": f"{data_bucket.name}@LOCAL/tiny-llama",
        "adapter": f"{data_bucket.name}@LOCAL/runs/1/adapter",
        "model_name": "bot",
    }
    app = app_create(access=access, user=owner, data=data)
    admit_jobs(project_id=project.pk)
    reconcile(str(app.pk))
    app.refresh_from_db()
    assert app.state == A.INITIALIZING, app.state_reason
    deployment = k8s_cluster.get("deployments", NS, f"app-{app.pk}")
    assert deployment is not None
    server = deployment["spec"]["template"]["spec"]["containers"][0]
    assert server["image"] == images.SERVING_IMAGE
    assert "--enable-lora" in server["args"]
    # No Ingress: the user-content gateway serves it on its own host.
    assert k8s_cluster.list("ingresses", NS) == []

    app = serve(k8s_cluster, app)
    assert (app.state, app.state_reason) == (A.RUNNING, "1 replica ready")
    assert app.progress["replicas"] == [1, 1]
    url = app.url
    assert url == f"https://app-{app.pk.hex}.uc.ajuste.example/"

    # An autoscaler asks for two: SCALING until the second serves.
    k8s_cluster.store.patch("deployments", NS, f"app-{app.pk}", {"spec": {"replicas": 2}})
    k8s_cluster.reconcile()
    sweep()
    app.refresh_from_db()
    assert (app.state, app.state_reason) == (A.SCALING, "1 of 2 replicas ready")
    for name in pods(k8s_cluster, app):
        k8s_cluster.kubelet.run(NS, name)
    sweep()
    app.refresh_from_db()
    assert (app.state, app.progress["replicas"]) == (A.RUNNING, [2, 2])

    app = app_stop(access=access, user=owner, app=app)
    reconcile(str(app.pk))
    app.refresh_from_db()
    assert app.state == A.STOPPING  # its pods terminate
    k8s_cluster.reconcile()  # the kubelet stops them
    sweep()
    app.refresh_from_db()
    assert app.state == A.STOPPED and pods(k8s_cluster, app) == []
    assert k8s_cluster.get("services", NS, f"app-{app.pk}") is not None

    app = app_start(access=access, user=owner, app=app)
    app = serve(k8s_cluster, app)
    assert app.state == A.RUNNING and app.url == url

    app_delete(access=access, user=owner, app=app)
    reconcile(str(app.pk))
    assert not App.objects.filter(pk=app.pk).exists()
    k8s_cluster.reconcile()
    for plural in ("deployments", "replicasets", "services", "ingresses", "pods"):
        assert k8s_cluster.list(plural, NS) == []
