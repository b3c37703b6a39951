"""A FAILED or ERROR app offers no "Try it" (#32): there is no server to answer it; a running
app does."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.flavors.models import Flavor
from controlpanel.projects.models import Project
from controlpanel.served.models import App


def make_app(project: Project, owner: Any, state: str) -> App:
    return App.objects.create(
        project=project,
        owner=owner,
        name=f"chat-{state.lower()}",
        image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": "chat"},
        volumes=["b@LOCAL/m:/workspace/model:ro"],
        state=state,
        state_reason="the server exited (2): the model folder /workspace/model does not exist",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )


@pytest.mark.parametrize("state", ["FAILED", "ERROR"])
def test_a_failed_app_offers_no_try_it(
    owner_client: Client, project: Project, owner: Any, state: str
) -> None:
    app = make_app(project, owner, state)
    page = owner_client.get(f"/p/{project.slug}/apps/{app.pk}/").content.decode()
    assert "the model folder /workspace/model does not exist" in page
    assert 'data-testid="try-it"' not in page and "Try it</h2>" not in page


def test_a_running_app_offers_try_it(owner_client: Client, project: Project, owner: Any) -> None:
    app = make_app(project, owner, "RUNNING")
    page = owner_client.get(f"/p/{project.slug}/apps/{app.pk}/").content.decode()
    assert 'data-testid="try-it"' in page
