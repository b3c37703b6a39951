"""Kueue's queue positions as the panel shows them (QUEUE_ENGINE=kueue), on the emulator's Kueue
(its visibility API answers `pendingworkloads` with each Workload's place): the periodic task
asks once per project with waiting work and keeps the places; the job page, the job list, the
API (`queue_position`) and `ajuste job get` show them, and they move up as the head starts."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import CustomObjectsApi

from controlpanel.engine.admission import admit_jobs
from controlpanel.engine.backend import job_ref
from controlpanel.engine.reconcile import reconcile
from controlpanel.engine.tasks import sweep_now
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.queues.models import ProjectQueue
from controlpanel.queues.positions import ordinal
from controlpanel.queues.services import queues_observe, queues_reconcile
from deploy import names
from tests.fixtures.cli import cli_as, ok_json
from tests.fixtures.jobs import submit
from tests.fixtures.k8s import kueue_on

pytestmark = [pytest.mark.k8s, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def kueue(
    k8s_cluster: Any, k8s_jobs: Any, settings: Any, project: Project, other_project: Project
) -> Any:
    handle = kueue_on(k8s_cluster, settings)
    Project.objects.filter(pk__in=[project.pk, other_project.pk]).update(gpu_quota=2)
    ProjectQueue.objects.create(project=project, borrowing_limit=0)  # alpha waits for its own
    assert queues_reconcile() == ["ajuste-alpha", "ajuste-beta"]
    return handle


def launch(cluster: Any, project: Project, user: Any, names_: list[str], gpu: int = 1) -> list[Job]:
    jobs = [submit(project, user, name=name, gpu=gpu) for name in names_]
    assert len(admit_jobs(project_id=project.pk)) == len(jobs)  # straight to Kueue
    for job in jobs:
        reconcile(str(job.pk))
    for job in jobs:
        for pod in cluster.pods_of(project.namespace, names.job_name(job_ref(job))):
            cluster.kubelet.run(project.namespace, pod["metadata"]["name"])
    sweep_now()
    return jobs


def test_the_places_kueue_gives_are_shown_everywhere_and_move_up(
    k8s_cluster: Any,
    kueue: Any,
    project: Project,
    owner: Any,
    owner_api: Any,
    owner_client: Any,
    live_server: Any,
) -> None:
    (head,) = launch(k8s_cluster, project, owner, ["head"], gpu=2)
    waiting = launch(k8s_cluster, project, owner, ["w1", "w2", "w3"])
    assert Job.objects.get(pk=head.pk).state == "RUNNING"
    assert {Job.objects.get(pk=j.pk).state for j in waiting} == {"QUEUED"}
    # Nothing is shown before the periodic task has asked Kueue (no page asks the cluster).
    before = owner_api.get(f"/api/v1/jobs/{waiting[0].pk}/?project=alpha").json()
    assert before["queue_position"] is None

    assert queues_observe()["positions"] == 3
    for place, job in enumerate(waiting, start=1):
        body = owner_api.get(f"/api/v1/jobs/{job.pk}/?project=alpha").json()
        said = f"{ordinal(place)} in the queue for alpha"
        assert body["queue_position"] == {"local": place, "cluster": place, "said": said}
    running = owner_api.get(f"/api/v1/jobs/{head.pk}/?project=alpha").json()
    assert running["queue_position"] is None
    listed = owner_api.get("/api/v1/jobs/?project=alpha").json()["results"]
    assert {r["name"]: r["queue_position"] and r["queue_position"]["local"] for r in listed} == {
        "head": None,
        "w1": 1,
        "w2": 2,
        "w3": 3,
    }
    page = owner_client.get(f"/p/alpha/jobs/{waiting[1].pk}/").content.decode()
    assert '<span class="badge badge-muted" data-testid="queue-position">2nd in the queue' in page
    rows = owner_client.get("/p/alpha/jobs/").content.decode()
    assert rows.count('data-testid="queue-place"') == 3
    assert "3rd in the queue for alpha" in rows
    shown = cli_as(owner, live_server.url)("job", "get", str(waiting[2].pk)[:8])
    assert shown.exit_code == 0, shown.output
    assert "queue: 3rd in the queue for alpha" in shown.output
    as_json = ok_json(
        cli_as(owner, live_server.url)("job", "get", str(waiting[2].pk), "-o", "json")
    )
    assert as_json["queue_position"]["local"] == 3

    # The head ends: w1 starts, w2 and w3 move up; w1's place is gone.
    pod = k8s_cluster.pods_of(project.namespace, names.job_name(job_ref(head)))[0]
    k8s_cluster.kubelet.finish(project.namespace, pod["metadata"]["name"], exit_code=0)
    sweep_now()
    launch_pods(k8s_cluster, project, waiting)
    assert queues_observe()["positions"] == 1
    places = {
        j.name: owner_api.get(f"/api/v1/jobs/{j.pk}/?project=alpha").json()["queue_position"]
        for j in waiting
    }
    assert places["w1"] is None and places["w2"] is None
    assert places["w3"] == {"local": 1, "cluster": 1, "said": "1st in the queue for alpha"}


def launch_pods(cluster: Any, project: Project, jobs: list[Job]) -> None:
    for job in jobs:
        for pod in cluster.pods_of(project.namespace, names.job_name(job_ref(job))):
            cluster.kubelet.run(project.namespace, pod["metadata"]["name"])
    sweep_now()


def test_a_project_whose_visibility_call_fails_shows_no_place_and_the_others_do(
    k8s_cluster: Any, kueue: Any, project: Project, other_project: Project, owner: Any
) -> None:
    from controlpanel.engine.selectors import queue_place

    launch(k8s_cluster, project, owner, ["head"], gpu=2)
    (mine,) = launch(k8s_cluster, project, owner, ["mine"])
    ProjectQueue.objects.create(project=other_project, borrowing_limit=0)
    queues_reconcile()
    launch(k8s_cluster, other_project, owner, ["theirs-head"], gpu=2)
    (theirs,) = launch(k8s_cluster, other_project, owner, ["theirs"])
    client = k8s_cluster.api_client()
    CustomObjectsApi(client).delete_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", other_project.namespace, "localqueues", "ajuste"
    )  # its visibility call now answers 404
    client.close()
    assert queues_observe()["positions"] == 1
    assert queue_place(job=Job.objects.get(pk=mine.pk)).said == "1st in the queue for alpha"
    assert queue_place(job=Job.objects.get(pk=theirs.pk)) is None


def test_ordinals() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "23rd",
        "101st",
        "111th",
    ]


@pytest.mark.django_db
def test_the_notebook_and_app_pages_lists_and_api_show_the_kept_place(
    settings: Any, project: Project, owner: Any, owner_client: Any, owner_api: Any
) -> None:
    """The page side alone (the emulator test above covers the reading): a notebook starting
    and an app queued under Kueue show the place the periodic task kept on their pages, lists
    and API answers, and nothing once the place has gone from the cache."""
    from django.core.cache import cache

    from controlpanel.flavors.models import Flavor
    from controlpanel.notebooks.models import Notebook
    from controlpanel.queues.positions import PREFIX
    from controlpanel.served.models import App

    settings.QUEUE_ENGINE = "kueue"
    flavor = Flavor.objects.get(name="ai1-1-cpu")
    notebook = Notebook.objects.create(
        project=project,
        owner=owner,
        name="nb",
        image="local",
        editor="jupyterlab",
        flavor=flavor,
        state="STARTING",
    )
    app = App.objects.create(
        project=project,
        owner=owner,
        name="app",
        image="x/serve:1",
        params={"model": "alpha-data@LOCAL/tiny", "model_name": "app"},
        state="QUEUED",
        flavor=flavor,
    )
    cache.set(f"{PREFIX}{notebook.pk}", (2, 2), 60)
    cache.set(f"{PREFIX}{app.pk}", (1, 3), 60)
    page = owner_client.get(f"/p/alpha/notebooks/{notebook.pk}/").content.decode()
    assert 'data-testid="queue-position">2nd in the queue for alpha</span>' in page
    page = owner_client.get(f"/p/alpha/apps/{app.pk}/").content.decode()
    said = "1st in the queue for alpha, 3rd in its ClusterQueue"
    assert f'data-testid="queue-position">{said}</span>' in page
    body = owner_api.get(f"/api/v1/apps/{app.pk}/?project=alpha").json()
    assert body["queue_position"] == {"local": 1, "cluster": 3, "said": said}
    body = owner_api.get(f"/api/v1/notebooks/{notebook.pk}/?project=alpha").json()
    assert body["queue_position"]["local"] == 2
    notebooks = owner_client.get("/p/alpha/notebooks/").content.decode()
    assert 'data-testid="queue-place">2nd in the queue for alpha</small>' in notebooks
    apps = owner_client.get("/p/alpha/apps/").content.decode()
    assert f'data-testid="queue-place">{said}</small>' in apps
    cache.delete_many([f"{PREFIX}{notebook.pk}", f"{PREFIX}{app.pk}"])
    assert 'data-testid="queue-position"' not in (
        owner_client.get(f"/p/alpha/apps/{app.pk}/").content.decode()
    )
    assert owner_api.get(f"/api/v1/apps/{app.pk}/?project=alpha").json()["queue_position"] is None


@pytest.mark.django_db
def test_the_builtin_engine_gives_the_panels_own_place_in_one_read_for_a_list(
    k8s_jobs: Any, project: Project, owner: Any, owner_api: Any
) -> None:
    """QUEUE_ENGINE=builtin: the same field from the panel's queue (its project's, first in
    first out); a list reads the places of its page at once, and says the same as each job."""
    Project.objects.filter(pk=project.pk).update(gpu_quota=1)
    jobs = [submit(project, owner, name=f"j{i}") for i in range(3)]
    assert admit_jobs(project_id=project.pk) == [str(jobs[0].pk)]
    one = {
        j.name: owner_api.get(f"/api/v1/jobs/{j.pk}/?project=alpha").json()["queue_position"]
        for j in jobs
    }
    assert one == {
        "j0": None,
        "j1": {"local": 1, "cluster": None, "said": "position 1 in the queue"},
        "j2": {"local": 2, "cluster": None, "said": "position 2 in the queue"},
    }
    listed = owner_api.get("/api/v1/jobs/?project=alpha").json()["results"]
    assert {r["name"]: r["queue_position"] for r in listed} == one
