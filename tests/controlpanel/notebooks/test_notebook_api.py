"""/api/v1/notebooks/: create (keyed 400s, nothing stored), list with the job list's filters,
get, start, stop, keep-alive, delete, logs; scoped by project like jobs; answers that match the
OpenAPI schema; the editor's token in no answer."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import jsonschema
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlpanel.accounts.models import User
from controlpanel.engine.models import JobEvent, JobLogLine
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks import validation as notebooks
from controlpanel.notebooks.auth import notebook_token
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.notebooks.usercontent import SERVED
from controlpanel.projects.models import Project
from controlpanel.usercontent.hosts import content_host
from tests.controlpanel.test_api_schema import Schema, to_json_schema
from tests.fixtures.panel import api_client_for

pytestmark = pytest.mark.django_db
N = NotebookState
URL = "/api/v1/notebooks/"


@pytest.fixture(autouse=True)
def _cluster(settings: Any) -> None:
    """The web process of a cluster deployment (the local backend would also check that this
    machine can serve the editor)."""
    settings.COMPUTE_BACKEND = "kubernetes"
    settings.SITE_URL = "https://panel.example.com"


def make(project: Project, owner: User, name: str = "explore", **fields: Any) -> Notebook:
    notebook = Notebook.objects.create(
        project=project,
        owner=owner,
        name=name,
        image="quay.io/jupyter/scipy-notebook:2024-10-07",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        params={"image": "python"},
        **{"state": N.STARTING, **fields},
    )
    JobEvent.objects.create(job=notebook, run=1, state=notebook.state, reason="created")
    return notebook


def test_create_answers_the_stored_notebook(owner_api: APIClient, project: Project) -> None:
    body = {
        "name": "explore",
        "image": "python",
        "editor": "jupyterlab",
        "flavor": "ai1-1-cpu",
        "env": {"SEED": "1"},
        "labels": {"team": "nlp"},
    }
    response = owner_api.post(f"{URL}?project=alpha", body, format="json")
    assert response.status_code == 201, response.content
    got = response.json()
    stored = Notebook.objects.get()
    assert got["id"] == str(stored.pk) and got["state"] == "STARTING"
    assert (got["image"], got["editor"], got["flavor"], got["gpu"]) == (
        "python",
        "jupyterlab",
        "ai1-1-cpu",
        1,
    )
    assert (got["env"], got["labels"], got["url"]) == ({"SEED": "1"}, {"team": "nlp"}, "")
    assert got["open_url"] == (f"https://panel.example.com/p/alpha/notebooks/{stored.pk}/open/")
    assert [e["state"] for e in got["history"]] == ["STARTING"]
    assert got["idle_deadline"] is None and got["cost"] is None


def test_a_bad_request_says_what_is_wrong_by_key_and_stores_nothing(
    owner_api: APIClient,
) -> None:
    body = {
        "flavor": "nope",
        "image": "cobol",
        "editor": "emacs",
        "volumes": ["bad"],
        "env": {"JUPYTER_TOKEN": "x", "AWS_KEY": "y"},
    }
    response = owner_api.post(URL, body, format="json", HTTP_X_AJUSTE_PROJECT="alpha")
    assert response.status_code == 400
    errors = response.json()
    assert {"flavor", "image", "editor", "volumes.0", "env.JUPYTER_TOKEN", "env.AWS_KEY"} <= set(
        errors
    ), errors
    assert errors["env.JUPYTER_TOKEN"] == [
        "JUPYTER_TOKEN is reserved: the panel sets the editor's token."
    ]
    assert not Notebook.objects.exists() and not JobEvent.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("editor", [None, None]), ("editor", {"a": 1}), ("image", ["python"])],
)
def test_a_value_of_the_wrong_type_is_a_keyed_400_not_a_500(
    owner_api: APIClient, field: str, value: Any
) -> None:
    """Found by the API fuzzer: a list as the editor answered a 500 (unhashable in the set of
    editors); an image name that is not text was looked up as its str()."""
    body = {"flavor": "ai1-1-cpu", field: value}
    response = owner_api.post(URL, body, format="json", HTTP_X_AJUSTE_PROJECT="alpha")
    assert response.status_code == 400, response.content
    assert set(response.json()) == {field}, response.json()
    assert not Notebook.objects.exists()


def test_list_filters_like_the_job_list(
    owner_api: APIClient, project: Project, owner: User, member: User
) -> None:
    make(project, owner, "alpha-nb", state=N.RUNNING, labels={"team": "nlp"})
    make(project, member, "beta-nb", state=N.STOPPED, labels={"team": "cv"})
    for query, names in [
        ("", ["beta-nb", "alpha-nb"]),
        ("state=running", ["alpha-nb"]),
        ("state=STOPPED", ["beta-nb"]),
        ("owner=member", ["beta-nb"]),
        ("label=team=nlp", ["alpha-nb"]),
        ("label=team", ["beta-nb", "alpha-nb"]),
        ("q=BETA", ["beta-nb"]),
    ]:
        response = owner_api.get(f"{URL}?project=alpha&{query}")
        assert response.status_code == 200, (query, response.content)
        page = response.json()
        assert [n["name"] for n in page["results"]] == names, query
        assert page["count"] == len(names)
    bad = owner_api.get(f"{URL}?project=alpha&state=QUEUED&label=a__regex=(")
    assert bad.status_code == 400
    assert set(bad.json()) == {"state", "label"}
    assert "STOPPED" in bad.json()["state"][0]


def test_start_stop_keep_alive_delete(owner_api: APIClient, project: Project, owner: User) -> None:
    project.notebook_idle_minutes = 30
    project.save()
    notebook = make(project, owner, state=N.STOPPED)
    one = f"{URL}{notebook.pk}/?project=alpha"
    started = owner_api.post(f"{URL}{notebook.pk}/start/?project=alpha")
    assert started.status_code == 200, started.content
    assert (started.json()["state"], started.json()["run"]) == ("STARTING", 2)
    again = owner_api.post(f"{URL}{notebook.pk}/start/?project=alpha")
    assert again.status_code == 400 and "stop it first" in again.content.decode()

    Notebook.objects.filter(pk=notebook.pk).update(
        state=N.RUNNING,
        admitted_at=timezone.now(),
        launched_run=2,
        last_activity_at=timezone.now() - timedelta(minutes=20),
    )
    before = owner_api.get(one).json()["idle_deadline"]
    kept = owner_api.post(f"{URL}{notebook.pk}/keep-alive/?project=alpha")
    assert kept.status_code == 200
    assert kept.json()["idle_deadline"] > before  # a full limit again

    stopped = owner_api.post(f"{URL}{notebook.pk}/stop/?project=alpha")
    assert stopped.status_code == 200 and stopped.json()["state"] == "STOPPING"
    assert stopped.json()["idle_deadline"] is None

    deleted = owner_api.delete(one)
    assert deleted.status_code == 204
    assert Notebook.objects.get(pk=notebook.pk).state == N.DELETING  # its objects go first


def test_a_member_acts_on_their_own_notebooks_only(
    project: Project, owner: User, member: User
) -> None:
    theirs = make(project, owner, state=N.RUNNING)
    api = api_client_for(member)
    assert api.get(f"{URL}{theirs.pk}/?project=alpha").status_code == 200
    refused = api.post(f"{URL}{theirs.pk}/stop/?project=alpha")
    assert refused.status_code == 403
    assert "owner or a project manager" in refused.json()["detail"]


def test_logs_have_the_job_logs_shape(owner_api: APIClient, project: Project, owner: User) -> None:
    notebook = make(project, owner, state=N.RUNNING, log_lines=2)
    JobLogLine.objects.bulk_create(
        JobLogLine(job=notebook, run=1, seq=i, text=f"[I ServerApp] line {i}") for i in (1, 2)
    )
    response = owner_api.get(f"{URL}{notebook.pk}/logs/?project=alpha&after=1")
    assert response.json() == {
        "lines": [{"seq": 2, "text": "[I ServerApp] line 2", "event": False}],
        "next": 2,
        "eof": False,
        "state": "RUNNING",
        "run": 1,
    }
    assert owner_api.get(f"{URL}{notebook.pk}/logs/?project=alpha&run=7").status_code == 400


def test_the_editor_token_is_in_no_answer(
    owner_api: APIClient, project: Project, owner: User
) -> None:
    """On the local backend the editor's address carries its token: the API gives the
    notebook's own host instead (and the panel page that opens it through a ticket)."""
    notebook = make(project, owner, state=N.RUNNING)
    token = notebook_token(notebook)
    Notebook.objects.filter(pk=notebook.pk).update(
        url=f"http://127.0.0.1:8890/nb/alpha/{notebook.pk}/?token={token}"
    )
    for url in [f"{URL}?project=alpha", f"{URL}{notebook.pk}/?project=alpha"]:
        response = owner_api.get(url)
        assert response.status_code == 200
        assert token not in response.content.decode()
    got = owner_api.get(f"{URL}{notebook.pk}/?project=alpha").json()
    assert got["url"] == content_host(SERVED.prefix, notebook.pk).origin + "/"


def test_answers_match_the_schema_and_the_body_is_the_contract(
    owner_api: APIClient, project: Project, owner: User
) -> None:
    document = owner_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    schema = Schema(document.json())
    running = make(project, owner, state=N.RUNNING, last_activity_at=timezone.now())
    project.notebook_idle_minutes = 60
    project.save()

    def call(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
        response = getattr(owner_api, method)(url, body, format="json")
        schema.check(method, url, response)
        return response

    one = f"{URL}{running.pk}/"
    call("get", f"{URL}?project=alpha&state=running&owner=owner&label=team&q=x&limit=5")
    call("get", f"{one}?project=alpha")
    call("get", f"{one}logs/?project=alpha&after=0&limit=10&run=1")
    call("post", f"{one}keep-alive/?project=alpha")
    call("post", f"{one}stop/?project=alpha")
    operation = schema.document["paths"][URL]["post"]
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body_schema = schema.document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(body_schema["properties"]) == {"project", *(f.name for f in notebooks.FIELDS)}
    assert body_schema["required"] == ["flavor"]
    body = {"name": "nb", "image": "python", "editor": "jupyterlab", "flavor": "ai1-1-cpu"}
    validator = jsonschema.Draft202012Validator(
        {"allOf": [to_json_schema(body_schema)], "components": schema.components}
    )
    assert not list(validator.iter_errors(body))
    created = call("post", f"{URL}?project=alpha", body)
    assert created.status_code == 201
    refused = call("post", f"{URL}?project=alpha", body | {"env": {"JUPYTER_TOKEN": "x"}})
    assert refused.status_code == 400
    detail = owner_api.get(f"{one}?project=alpha").json()
    assert detail["idle_deadline"] is None  # stopping: no idle clock


def test_the_project_is_named_like_for_jobs(
    owner_api: APIClient, outsider_api: APIClient, project: Project, owner: User
) -> None:
    notebook = make(project, owner)
    assert owner_api.get(URL, HTTP_X_AJUSTE_PROJECT="alpha").json()["count"] == 1
    assert owner_api.get(URL).json()["count"] == 1  # the owner's only project
    assert outsider_api.get(f"{URL}{notebook.pk}/?project=alpha").status_code == 404
    mine = outsider_api.get(f"{URL}{notebook.pk}/?project=beta")
    assert mine.status_code == 404
