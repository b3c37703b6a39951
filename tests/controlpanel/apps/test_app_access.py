"""Who reaches an app, without a server behind it, on its own host under USER_CONTENT_DOMAIN
(`app-<id>.localhost:8000` under the local backend, the panel's proxy; the gateway's question at
the panel's internal address on a cluster): anonymous callers (401), wrong tokens (401) and
other projects' members (404 / 403, the app not revealed) are refused, a session is no token,
and a public app lets anyone through. And "Deploy this adapter" on a finished fine-tune job
fills the form with its adapter's folder."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.accounts.services import token_create
from controlpanel.flavors.models import Flavor
from controlpanel.jobs.models import Job
from controlpanel.projects.models import Project
from controlpanel.served.models import App
from controlpanel.usercontent.domain import parse_content_domain

INTERNAL = "ajuste-web.ajuste.svc.cluster.local"


@pytest.fixture(autouse=True)
def content_domain(settings: Any) -> None:
    settings.COMPUTE_BACKEND = "local"
    settings.USER_CONTENT_DOMAIN = parse_content_domain("localhost:8000")
    settings.KUBERNETES_PANEL_URL = f"http://{INTERNAL}"


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


def host(app: App) -> str:
    return f"app-{app.pk.hex}.localhost:8000"


@pytest.mark.django_db
def test_the_apps_host_takes_only_the_projects_tokens(
    project: Project, owner: Any, outsider: Any
) -> None:
    app = make_app(project, owner)
    client = Client()

    def get(**headers: str) -> Any:
        return client.get("/v1/models", HTTP_HOST=host(app), **headers)

    anonymous = get()
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"] == "Bearer"
    assert "Bearer" in anonymous.json()["error"]["message"]
    assert get(HTTP_AUTHORIZATION="Bearer ajt_nope").status_code == 401
    assert get(HTTP_AUTHORIZATION="Basic eDp5").status_code == 401
    stranger = get(HTTP_AUTHORIZATION=bearer(outsider))
    assert stranger.status_code == 403 and stranger.json()["error"]["message"] == "No such app."
    # The owner's token gets through to the (absent) server: 502, not a refusal.
    assert get(HTTP_AUTHORIZATION=bearer(owner)).status_code == 502
    # A session is not a token: a logged-in member's browser is refused too.
    client.force_login(owner)
    assert get().status_code == 401
    # ...and the panel's old address of an app serves nothing any more.
    assert client.get(f"/a/alpha/{app.pk}/v1/models").status_code == 404


@pytest.mark.django_db
def test_a_stopped_app_says_so_and_a_public_one_needs_no_token(
    project: Project, owner: Any
) -> None:
    stopped = make_app(project, owner, state="STOPPED")
    answer = Client().get("/v1/models", HTTP_HOST=host(stopped), HTTP_AUTHORIZATION=bearer(owner))
    assert answer.status_code == 403
    assert answer.json()["error"]["message"] == "The app is not running: start it from the panel."
    public = make_app(project, owner, public=True)
    assert Client().get("/v1/models", HTTP_HOST=host(public)).status_code == 502  # let through


@pytest.mark.django_db
def test_the_gateways_question_checks_the_token_for_this_app_only(
    project: Project, owner: Any, outsider: Any
) -> None:
    app = make_app(project, owner)
    other = make_app(project, owner, state="STOPPED")
    client = Client()

    def ask(authorization: str, target: App = app) -> int:
        headers = {"HTTP_X_AJUSTE_HOST": host(target), "HTTP_X_ORIGINAL_URI": "/v1/models"}
        if authorization:
            headers["HTTP_AUTHORIZATION"] = authorization
        return client.get("/_ajuste/auth", HTTP_HOST=INTERNAL, **headers).status_code

    assert ask("") == 401
    assert ask("Bearer ajt_nope") == 401
    assert ask(bearer(outsider)) == 403
    assert ask(bearer(owner)) == 200
    assert ask(bearer(owner), other) == 403  # stopped: nothing to send it to
    # The same question at the panel's public address is not answered.
    public = client.get(
        "/_ajuste/auth", HTTP_X_AJUSTE_HOST=host(app), HTTP_AUTHORIZATION=bearer(owner)
    )
    assert public.status_code == 404


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
