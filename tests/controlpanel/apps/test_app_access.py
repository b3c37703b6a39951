"""Who reaches an app, without a server behind it: the panel's proxy and the forward-auth
endpoint refuse anonymous callers (401), wrong tokens (401), other projects' members (404 /
403, the app not revealed) and paths of another app; a public app lets anyone through. And
"Deploy this adapter" on a finished fine-tune job fills the form with its adapter's folder."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.accounts.services import token_create
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.served.models import App

AUTH_HOST = "ajuste-web.ajuste.svc.cluster.local"


def make_app(project: Project, owner: Any, *, public: bool = False, state: str = "RUNNING") -> App:
    return App.objects.create(
        project=project,
        owner=owner,
        name="chat",
        image="x/serve:1",
        params={"model": "b@LOCAL/m", "model_name": "chat", "public": public},
        volumes=["b@LOCAL/m:/workspace/model:ro"],
        state=state,
        url="http://127.0.0.1:9",  # nothing listens there: a call that gets through is a 502
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )


def bearer(user: Any) -> str:
    return f"Bearer {token_create(user=user, name='t')[1]}"


@pytest.mark.django_db
def test_the_proxy_takes_only_the_projects_tokens(
    project: Project, owner: Any, outsider: Any
) -> None:
    app = make_app(project, owner)
    url = f"/a/alpha/{app.pk}/v1/models"
    client = Client()
    anonymous = client.get(url)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"] == "Bearer"
    assert "Bearer" in anonymous.json()["error"]["message"]
    assert client.get(url, HTTP_AUTHORIZATION="Bearer ajt_nope").status_code == 401
    assert client.get(url, HTTP_AUTHORIZATION="Basic eDp5").status_code == 401
    stranger = client.get(url, HTTP_AUTHORIZATION=bearer(outsider))
    assert stranger.status_code == 404 and stranger.json()["error"]["message"] == "No such app."
    beta = client.get(f"/a/beta/{app.pk}/v1/models", HTTP_AUTHORIZATION=bearer(outsider))
    assert beta.status_code == 404
    # The owner's token gets through to the (absent) server: 502, not a refusal.
    assert client.get(url, HTTP_AUTHORIZATION=bearer(owner)).status_code == 502
    # A session is not a token: a logged-in member's browser is refused too.
    client.force_login(owner)
    assert client.get(url).status_code == 401


@pytest.mark.django_db
def test_a_stopped_app_says_so_and_a_public_one_needs_no_token(
    project: Project, owner: Any
) -> None:
    stopped = make_app(project, owner, state="STOPPED")
    answer = Client().get(f"/a/alpha/{stopped.pk}/v1/models", HTTP_AUTHORIZATION=bearer(owner))
    assert answer.status_code == 503 and "STOPPED" in answer.json()["error"]["message"]
    public = make_app(project, owner, public=True)
    assert Client().get(f"/a/alpha/{public.pk}/v1/models").status_code == 502  # let through


@pytest.mark.django_db
def test_forward_auth_checks_the_token_and_the_path(
    project: Project, owner: Any, outsider: Any
) -> None:
    app = make_app(project, owner)
    other = make_app(project, owner)
    client = Client()

    def ask(authorization: str, path: str) -> int:
        headers = {"HTTP_X_ORIGINAL_URI": path, "HTTP_HOST": AUTH_HOST}
        if authorization:
            headers["HTTP_AUTHORIZATION"] = authorization
        return client.get(f"/auth/app/{app.pk}", **headers).status_code

    base = f"/a/alpha/{app.pk}/v1/chat/completions"
    assert ask("", base) == 401
    assert ask("Bearer ajt_nope", base) == 401
    assert ask(bearer(outsider), base) == 403
    assert ask(bearer(owner), base) == 200
    assert ask(bearer(owner), f"/a/alpha/{other.pk}/v1/models") == 403
    assert ask(bearer(owner), f"/a/alpha/{app.pk}/../{other.pk}/v1/models") == 403


@pytest.mark.django_db
def test_deploy_this_adapter_fills_the_form_from_a_finished_finetune(
    project: Project, owner: Any, owner_client: Client
) -> None:
    job = Job.objects.create(
        project=project,
        owner=owner,
        name="demo fine-tune",
        image="x/finetune:1",
        preset="finetune",
        state="DONE",
        volumes=[
            "demo@LOCAL/tiny-llama:/workspace/model:ro",
            "demo@LOCAL/chat:/workspace/data:ro",
            "demo@LOCAL/runs/20250101-120000:/workspace/output:rw",
        ],
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
    )
    page = owner_client.get(f"/p/alpha/jobs/{job.pk}/").content.decode()
    assert f"/p/alpha/apps/new/?from_job={job.pk}" in page
    form = owner_client.get(f"/p/alpha/apps/new/?from_job={job.pk}").content.decode()
    assert 'value="demo@LOCAL/tiny-llama"' in form
    assert 'value="demo@LOCAL/runs/20250101-120000/adapter"' in form
