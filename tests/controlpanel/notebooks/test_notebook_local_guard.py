"""The local backend's guard at a notebook's start (issue 25): with COMPUTE_BACKEND=local a
notebook is a shell as the panel's OS user, so with more than one active account (one added
after the processes started included) and the backend not marked trusted, creating or starting
a notebook is refused with the guard's reason and nothing starts, through the API, the pages
and the engine's apply alike."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlpanel.accounts.local_guard import REFUSAL
from controlpanel.accounts.models import User
from controlpanel.engine.models import JobEvent
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.driver import DRIVER
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState as N
from controlpanel.projects.models import Project
from deploy.types import DeployError
from tests.fixtures.panel import logged_in

pytestmark = pytest.mark.django_db
URL = "/api/v1/notebooks/"
BODY = {"name": "explore", "image": "python", "editor": "jupyterlab", "flavor": "ai1-1-cpu"}


@pytest.fixture(autouse=True)
def _untrusted_local(settings: Any) -> None:
    settings.COMPUTE_BACKEND = "local"
    settings.AJUSTE_LOCAL_BACKEND_TRUSTED = False


def stopped(project: Project, owner: User) -> Notebook:
    notebook = Notebook.objects.create(
        project=project,
        owner=owner,
        name="explore",
        image="quay.io/jupyter/minimal-notebook:python-3.12",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        params={"image": "python"},
        state=N.STOPPED,
    )
    JobEvent.objects.create(job=notebook, run=1, state=N.STOPPED, reason="created")
    return notebook


def test_the_api_refuses_a_notebook_while_another_account_is_active(
    owner_api: APIClient, project: Project, owner: User, member: User, settings: Any
) -> None:
    made = owner_api.post(f"{URL}?project=alpha", BODY, format="json")
    assert made.status_code == 400
    assert made.json() == {"detail": [REFUSAL]}
    assert not Notebook.objects.exists()
    notebook = stopped(project, owner)
    start = f"{URL}{notebook.pk}/start/?project=alpha"
    refused = owner_api.post(start)
    assert refused.status_code == 400 and refused.json() == {"detail": [REFUSAL]}
    notebook.refresh_from_db()
    assert (notebook.state, notebook.run) == (N.STOPPED, 1)
    settings.AJUSTE_LOCAL_BACKEND_TRUSTED = True
    started = owner_api.post(start)
    assert started.status_code == 200, started.content
    assert started.json()["state"] == "STARTING"


def test_the_page_refuses_a_start_and_the_apply_a_queued_one(
    project: Project, owner: User, member: User
) -> None:
    notebook = stopped(project, owner)
    page = (
        logged_in(owner)
        .post(f"/p/alpha/notebooks/{notebook.pk}/start/", follow=True)
        .content.decode()
    )
    assert REFUSAL.replace("'", "&#x27;") in page
    notebook.refresh_from_db()
    assert (notebook.state, notebook.run) == (N.STOPPED, 1)
    # Asked for while one account was active; a second one activated before it is applied.
    Notebook.objects.filter(pk=notebook.pk).update(state=N.STARTING, run=2)
    notebook.refresh_from_db()
    with pytest.raises(DeployError, match="COMPUTE_BACKEND=local"):
        DRIVER.apply(notebook)
    member.is_active = False
    member.save()
    Notebook.objects.filter(pk=notebook.pk).update(state=N.STOPPED, run=1)
    logged_in(owner).post(f"/p/alpha/notebooks/{notebook.pk}/start/")
    notebook.refresh_from_db()
    assert notebook.state == N.STARTING
