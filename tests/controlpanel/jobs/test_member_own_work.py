"""A plain member (no manager role) acts on their own job and notebook: stop, run again,
delete, through the API and through the pages' buttons, while a colleague's work stays refused
to them. (The role matrix covers a member on someone else's work; this is the other half of
engine/services.workload_locked's rule: the owner or a manager.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.jobs.states import JobState
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from tests.fixtures.panel import api_client_for, logged_in

pytestmark = pytest.mark.django_db
REFUSED = "Only the job's owner or a project manager can do this."


def _job(project: Project, owner: Any, name: str) -> Job:
    flavor = Flavor.objects.get(name="h100-1-gpu")
    return Job.objects.create(project=project, owner=owner, name=name, image="x/y:1", flavor=flavor)


def _notebook(project: Project, owner: Any) -> Notebook:
    return Notebook.objects.create(
        project=project,
        owner=owner,
        name="mine",
        image="quay.io/jupyter/scipy-notebook",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=NotebookState.RUNNING,
    )


def test_a_member_stops_reruns_and_deletes_their_own_work_through_the_api(
    project: Project, owner: Any, member: Any
) -> None:
    api = api_client_for(member)
    mine, theirs = _job(project, member, "mine"), _job(project, owner, "theirs")
    url = f"/api/v1/jobs/{mine.pk}/{{}}?project=alpha"

    stopped = api.post(url.format("stop/"))
    assert stopped.status_code == 200 and stopped.json()["state"] == JobState.INTERRUPTED
    again = api.post(url.format("rerun/"))
    assert again.status_code == 200, again.content
    assert Job.objects.get(pk=mine.pk).run == 2
    assert api.post(url.format("stop/")).status_code == 200
    assert api.delete(url.format("")).status_code == 204
    assert not Job.objects.filter(pk=mine.pk).exists()

    refused = api.post(f"/api/v1/jobs/{theirs.pk}/stop/?project=alpha")
    assert refused.status_code == 403 and refused.json()["detail"] == REFUSED
    assert Job.objects.get(pk=theirs.pk).state == JobState.QUEUED  # nothing changed

    notebook = _notebook(project, member)
    nb_url = f"/api/v1/notebooks/{notebook.pk}/{{}}?project=alpha"
    assert api.post(nb_url.format("stop/")).json()["state"] == NotebookState.STOPPED
    assert api.delete(nb_url.format("")).status_code == 204


def _press(client: Client, path: str) -> str:
    """A button's POST, followed: the page it lands on."""
    response = client.post(path, follow=True)
    assert response.status_code == 200, path
    return str(response.content.decode())


def test_a_member_presses_stop_run_again_and_delete_on_their_own_pages(
    project: Project, owner: Any, member: Any
) -> None:
    client = logged_in(member)
    mine, theirs = _job(project, member, "mine"), _job(project, owner, "theirs")
    page = f"/p/alpha/jobs/{mine.pk}/"

    assert "Stop requested." in _press(client, page + "stop/")
    assert Job.objects.get(pk=mine.pk).state == JobState.INTERRUPTED
    assert "Queued again." in _press(client, page + "rerun/")
    assert Job.objects.get(pk=mine.pk).run == 2
    _press(client, page + "stop/")
    assert "Job deleted." in _press(client, page + "delete/")
    assert not Job.objects.filter(pk=mine.pk).exists()

    refused = _press(client, f"/p/alpha/jobs/{theirs.pk}/stop/")
    assert "Only the job&#x27;s owner or a project manager can do this." in refused
    assert Job.objects.get(pk=theirs.pk).state == JobState.QUEUED

    notebook = _notebook(project, member)
    nb_page = f"/p/alpha/notebooks/{notebook.pk}/"
    assert "Stopping: its rw volumes are pushed" in _press(client, nb_page + "stop/")
    assert Notebook.objects.get(pk=notebook.pk).state == NotebookState.STOPPED
    assert "Deleting the notebook" in _press(client, nb_page + "delete/")
