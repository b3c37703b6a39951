"""The forward-auth endpoint ingress-nginx asks before every request to a notebook on a cluster
(`/auth/notebook/<id>`), through the Django test client, as ingress-nginx calls it: at the web
Service's cluster name over plain http, with the session cookie of the browser and the
original request's address in X-Original-URL / X-Original-URI."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.test import Client

from controlpanel.accounts.models import User
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.auth import notebook_token
from controlpanel.notebooks.driver import notebook_request
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from deploy.manifests import make_notebook_ingress, make_notebook_secret
from tests.fixtures.panel import UserFactory, add_member, logged_in

pytestmark = pytest.mark.django_db
INTERNAL = "ajuste-web.ajuste.svc.cluster.local"
N = NotebookState


def make_notebook(project: Project, owner: User, state: str = N.RUNNING) -> Notebook:
    return Notebook.objects.create(
        project=project,
        owner=owner,
        name="explore",
        image="quay.io/jupyter/scipy-notebook",
        editor="jupyterlab",
        flavor=Flavor.objects.get(name="ai1-1-cpu"),
        state=state,
    )


def ask(client: Client, notebook: Notebook, path: str = "", host: str = INTERNAL) -> Any:
    """What ingress-nginx sends for a request to `path` (default: the notebook's lab page)."""
    path = path or f"/nb/{notebook.project.slug}/{notebook.pk}/lab?reset"
    return client.get(
        f"/auth/notebook/{notebook.pk}",
        HTTP_HOST=host,
        HTTP_X_ORIGINAL_URL=f"https://notebooks.example.com{path}",
        HTTP_X_ORIGINAL_URI=path,
        HTTP_X_SENT_FROM="nginx-ingress-controller",
    )


@pytest.fixture
def notebook(project: Project, owner: User) -> Notebook:
    return make_notebook(project, owner)


def test_the_owner_gets_through_with_the_editor_token(
    notebook: Notebook, owner_client: Client, settings: Any
) -> None:
    settings.SECURE_SSL_REDIRECT = True  # plain http at the Service: answered all the same
    response = ask(owner_client, notebook)
    assert response.status_code == 200
    assert response["Authorization"] == f"token {notebook_token(notebook)}"
    assert (response["X-Ajuste-User"], response["X-Ajuste-Project"]) == ("owner", "alpha")
    assert response["Cache-Control"] == "no-store"
    assert "Set-Cookie" not in response


def test_another_member_of_the_project_gets_through(
    notebook: Notebook, member: User, project: Project
) -> None:
    response = ask(logged_in(member), notebook)
    assert response.status_code == 200 and response["X-Ajuste-User"] == "member"


def test_a_member_of_another_project_is_refused(
    notebook: Notebook, outsider_client: Client
) -> None:
    response = ask(outsider_client, notebook)
    assert response.status_code == 403 and "Authorization" not in response


def test_anonymous_is_sent_to_log_in(notebook: Notebook) -> None:
    assert ask(Client(), notebook).status_code == 401


def test_an_inactive_user_is_anonymous(notebook: Notebook, owner: User) -> None:
    client = logged_in(owner)
    owner.is_active = False
    owner.save()
    assert ask(client, notebook).status_code == 401


@pytest.mark.parametrize("state", [N.STOPPED, N.FAILED, N.ERROR, N.DELETING])
def test_a_notebook_that_is_not_serving_is_refused(
    project: Project, owner: User, owner_client: Client, state: str
) -> None:
    notebook = make_notebook(project, owner, state)
    assert ask(owner_client, notebook).status_code == 403


@pytest.mark.parametrize("state", [N.STARTING, N.STOPPING])
def test_a_notebook_starting_or_stopping_is_served(
    project: Project, owner: User, owner_client: Client, state: str
) -> None:
    assert ask(owner_client, make_notebook(project, owner, state)).status_code == 200


def test_a_cookie_for_one_notebook_never_opens_another(
    project: Project, other_project: Project, owner: User, owner_client: Client
) -> None:
    """The owner may open both A and B; a request nginx routed to A (by its normalised path)
    whose original path names B, or no notebook, is refused: each notebook's answer (and its
    token) vouches for that notebook's own path only."""
    a, b = make_notebook(project, owner), make_notebook(project, owner)
    mine = f"/nb/alpha/{a.pk}"
    assert ask(owner_client, a, f"{mine}/api/kernels").status_code == 200
    assert ask(owner_client, a, mine).status_code == 200  # the bare prefix (a redirect)
    for path in [
        f"/nb/alpha/{b.pk}/api/kernels",
        f"{mine}/../{b.pk}/api/kernels",
        f"{mine}/%2E%2E/{b.pk}/api",
        f"{mine}x/api",
        f"/nb/beta/{a.pk}/api",
        "/admin/",
    ]:
        assert ask(owner_client, a, path).status_code == 403, path
    # Both headers must agree: nginx sends both, a forged one of them is refused.
    mixed = owner_client.get(
        f"/auth/notebook/{a.pk}",
        HTTP_HOST=INTERNAL,
        HTTP_X_ORIGINAL_URL=f"https://notebooks.example.com{mine}/lab",
        HTTP_X_ORIGINAL_URI=f"/nb/alpha/{b.pk}/lab",
    )
    assert mixed.status_code == 403
    bare = owner_client.get(f"/auth/notebook/{a.pk}", HTTP_HOST=INTERNAL)
    assert bare.status_code == 403  # no original path: nothing to vouch for


def test_the_token_never_reaches_a_browser_asking_the_panel_itself(
    notebook: Notebook, owner_client: Client
) -> None:
    """At the panel's public address (what a browser could ask) the answer is the same, less
    the token: only a caller that addressed the cluster-internal Service gets it."""
    response = ask(owner_client, notebook, host="testserver")
    assert response.status_code == 200 and "Authorization" not in response


def test_an_unknown_notebook_or_a_bad_id_is_refused(owner_client: Client) -> None:
    unknown = owner_client.get(
        "/auth/notebook/00000000-0000-0000-0000-000000000000", HTTP_HOST=INTERNAL
    )
    assert unknown.status_code == 403
    assert owner_client.get("/auth/notebook/nope", HTTP_HOST="testserver").status_code == 404


def test_each_start_has_its_own_token(notebook: Notebook) -> None:
    first = notebook_token(notebook)
    notebook.run += 1
    assert notebook_token(notebook) != first and len(first) == 64


def test_the_ingress_asks_this_endpoint_and_forwards_the_token(
    notebook: Notebook, settings: Any
) -> None:
    """What the cluster gets: the auth URL is this route, the sign-in URL the log-in page, the
    token the one the endpoint answers with, in the notebook's own Secret."""
    settings.SITE_URL = "https://panel.example.com"
    request = notebook_request(notebook)
    annotations = make_notebook_ingress(notebook=request)["metadata"]["annotations"]
    nginx = "nginx.ingress.kubernetes.io/"
    assert annotations[nginx + "auth-url"] == (f"http://{INTERNAL}/auth/notebook/{notebook.pk}")
    assert annotations[nginx + "auth-signin"] == "https://panel.example.com/login/"
    assert "Authorization" in annotations[nginx + "auth-response-headers"].split(",")
    assert make_notebook_secret(notebook=request)["stringData"] == {
        "token": notebook_token(notebook)
    }


def test_a_site_admin_outside_the_project_gets_through_like_everywhere_else(
    notebook: Notebook,
) -> None:
    """project_access() is the one rule: site admins see every project."""
    admin = UserFactory(username="root", is_staff=True)
    assert ask(logged_in(admin), notebook).status_code == 200


def test_a_member_removed_from_the_project_is_refused_at_once(
    notebook: Notebook, project: Project
) -> None:
    user = UserFactory(username="leaver")
    membership = add_member(project, user)
    client = logged_in(user)
    assert ask(client, notebook).status_code == 200
    membership.delete()
    assert ask(client, notebook).status_code == 403


@pytest.mark.k8s
@pytest.mark.django_db(transaction=True)
def test_the_cluster_holds_the_token_of_the_current_run_and_drops_it_with_the_notebook(
    k8s_cluster: Any, k8s_jobs: Any, project: Project, owner: User
) -> None:
    from controlpanel.engine.reconcile import reconcile
    from controlpanel.notebooks.services import notebook_delete, notebook_start, notebook_stop
    from tests.controlpanel.jobs.test_notebook_engine import NS, create, started, stopped
    from tests.fixtures.jobs import access_for

    def token_in_cluster(notebook: Notebook) -> str | None:
        secret = k8s_cluster.get("secrets", NS, f"nb-{notebook.pk}")
        return None if secret is None else base64.b64decode(secret["data"]["token"]).decode()

    notebook = started(k8s_cluster, create(project, owner))
    assert token_in_cluster(notebook) == notebook_token(notebook)
    first = notebook_token(notebook)
    notebook_stop(access=access_for(project), user=owner, notebook=notebook)
    reconcile(str(notebook.pk))
    stopped(k8s_cluster)  # its pod stops; the notebook is STOPPED
    notebook.refresh_from_db()
    notebook = notebook_start(access=access_for(project), user=owner, notebook=notebook)
    notebook = started(k8s_cluster, notebook)
    assert token_in_cluster(notebook) == notebook_token(notebook) != first
    notebook_delete(access=access_for(project), user=owner, notebook=notebook)
    reconcile(str(notebook.pk))
    assert token_in_cluster(notebook) is None
