"""Who may open a notebook, as the user-content gateway asks the panel before every request to
the notebook's own host (`/_ajuste/auth` at the web Service's cluster name, over plain http,
with the browser's content cookie for that host and the original request's URI), through the
Django test client. The cookie is the one the ticket exchange gives (controlpanel/usercontent);
here it is issued and redeemed through the same services."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from controlpanel.accounts.models import User
from controlpanel.flavors.models import Flavor
from controlpanel.notebooks.auth import notebook_token
from controlpanel.notebooks.driver import notebook_request
from controlpanel.notebooks.models import Notebook
from controlpanel.notebooks.sharing import NOT_SHARED
from controlpanel.notebooks.states import NotebookState
from controlpanel.projects.models import Project
from controlpanel.usercontent.hosts import content_host
from controlpanel.usercontent.tickets import cookie_name, cookie_value, ticket_issue, ticket_redeem
from deploy.manifests import make_notebook_secret
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
        url="http://127.0.0.1:8888/?token=t",
    )


def cookie_for(client: Client, notebook: Notebook) -> str:
    """The content cookie the ticket exchange gives `client`'s user for the notebook's host."""
    host = content_host("nb", notebook.pk)
    user = User.objects.get(pk=client.session["_auth_user_id"])
    url = ticket_issue(
        user=user,
        session_key=client.session.session_key or "",
        kind="notebook",
        host=host,
        next_path="/",
    )
    ticket = ticket_redeem(raw=parse_qs(urlsplit(url).query)["ticket"][0], host=host)
    assert ticket is not None
    return f"{cookie_name()}={cookie_value(ticket, host)}"


def ask(
    client: Client | None, notebook: Notebook, path: str = "/lab?reset", host: str = INTERNAL
) -> Any:
    """What the gateway sends before a request to `path` on the notebook's host."""
    return Client().get(
        "/_ajuste/auth",
        HTTP_HOST=host,
        HTTP_X_AJUSTE_HOST=content_host("nb", notebook.pk).netloc,
        HTTP_X_ORIGINAL_URI=path,
        HTTP_X_ORIGINAL_METHOD="GET",
        HTTP_COOKIE=cookie_for(client, notebook) if client else "",
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
    assert response["X-Ajuste-Authorization"] == f"token {notebook_token(notebook)}"
    assert response["X-Ajuste-Upstream"] == "127.0.0.1:8888"
    assert response["Cache-Control"] == "no-store"
    assert "Set-Cookie" not in response


def share(notebook: Notebook) -> None:
    notebook.params = {**notebook.params, "shared": True}
    notebook.save(update_fields=["params"])


def test_another_member_is_refused_until_the_owner_shares_it(
    notebook: Notebook, member: User, project: Project
) -> None:
    """A notebook is its owner's (controlpanel/notebooks/sharing.py), even with a valid
    cookie for its host: the gate asks at every request."""
    refused = ask(logged_in(member), notebook)
    assert refused.status_code == 403 and "X-Ajuste-Authorization" not in refused
    assert refused["X-Ajuste-Reason"] == NOT_SHARED
    share(notebook)
    response = ask(logged_in(member), notebook)
    assert response.status_code == 200 and response["X-Ajuste-Authorization"]


def test_a_member_of_another_project_is_refused(
    notebook: Notebook, outsider_client: Client
) -> None:
    response = ask(outsider_client, notebook)
    assert response.status_code == 403 and "X-Ajuste-Authorization" not in response
    assert response["X-Ajuste-Reason"] == "No such notebook."


def test_anonymous_is_sent_to_log_in(notebook: Notebook) -> None:
    response = ask(None, notebook)
    assert response.status_code == 401
    assert response["X-Ajuste-Signin"].endswith(f"?host=nb-{notebook.pk.hex}&next=%2Flab%3Freset")


def test_an_inactive_user_is_anonymous(notebook: Notebook, owner: User) -> None:
    client = logged_in(owner)
    cookie = cookie_for(client, notebook)
    owner.is_active = False
    owner.save()
    answer = Client().get(
        "/_ajuste/auth",
        HTTP_HOST=INTERNAL,
        HTTP_X_AJUSTE_HOST=content_host("nb", notebook.pk).netloc,
        HTTP_COOKIE=cookie,
    )
    assert answer.status_code == 401


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
    project: Project, owner: User, owner_client: Client
) -> None:
    """The owner may open both A and B; A's cookie sent to B's host opens nothing there: each
    host's cookie is signed for that host alone."""
    a, b = make_notebook(project, owner), make_notebook(project, owner)
    cookie = cookie_for(owner_client, a)
    for target, status in ((a, 200), (b, 401)):
        answer = Client().get(
            "/_ajuste/auth",
            HTTP_HOST=INTERNAL,
            HTTP_X_AJUSTE_HOST=content_host("nb", target.pk).netloc,
            HTTP_COOKIE=cookie,
        )
        assert answer.status_code == status


def test_the_token_never_reaches_a_browser_asking_the_panel_itself(
    notebook: Notebook, owner_client: Client
) -> None:
    """At the panel's public address (what a browser could ask) there is no such endpoint:
    only a caller that addressed the cluster-internal Service gets an answer, and the token."""
    response = ask(owner_client, notebook, host="testserver")
    assert response.status_code == 404 and "X-Ajuste-Authorization" not in response


def test_an_unknown_notebook_or_a_bad_host_is_refused(owner_client: Client) -> None:
    for host in ("nb-00000000000000000000000000000000.localhost:8000", "nb-nope.localhost:8000"):
        answer = Client().get("/_ajuste/auth", HTTP_HOST=INTERNAL, HTTP_X_AJUSTE_HOST=host)
        assert answer.status_code == 403


def test_each_start_has_its_own_token(notebook: Notebook) -> None:
    first = notebook_token(notebook)
    notebook.run += 1
    assert notebook_token(notebook) != first and len(first) == 64


def test_the_cluster_gets_the_token_the_gateway_is_answered_with(
    notebook: Notebook, owner_client: Client
) -> None:
    """The notebook's own Secret holds the token the panel gives the gateway, and the notebook
    is served on its own host at its root."""
    request = notebook_request(notebook)
    assert make_notebook_secret(notebook=request)["stringData"] == {
        "token": notebook_token(notebook)
    }
    assert (request.host, request.path) == (content_host("nb", notebook.pk).netloc, "/")
    assert ask(owner_client, notebook)["X-Ajuste-Authorization"] == f"token {request.token}"


def test_a_site_admin_or_a_manager_opens_no_one_elses_notebook(
    notebook: Notebook, project: Project
) -> None:
    """They may stop or delete it (engine/services.py), not open it: an editor is a shell
    with its owner's volumes and secrets."""
    admin = UserFactory(username="root", is_staff=True)
    manager = UserFactory(username="boss")
    add_member(project, manager, "manager")
    for user in (admin, manager):
        refused = ask(logged_in(user), notebook)
        assert refused.status_code == 403 and refused["X-Ajuste-Reason"] == NOT_SHARED


def test_a_member_removed_from_the_project_is_refused_at_once(
    notebook: Notebook, project: Project
) -> None:
    share(notebook)
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
